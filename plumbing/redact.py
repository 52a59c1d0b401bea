"""Secrets kept out of what leaves the broker as text: log lines and error messages.

`Redactor.text` replaces every secret it recognises by `[redacted]`: bearer
tokens, PEM blocks, the common vendor key shapes (OpenAI `sk-`, GitHub `ghp_` and
its kin, Slack `xox?-`, AWS `AKIA`), JWTs, a URL's password, the secrets the
configuration holds (channel tokens, engine keys) and the operator's own patterns
(`[logging] redact`). It is one compiled expression, tried once per string. The
ledger keeps what people said verbatim; this is only for what leaves by the logs
and error frames. A pattern that does not compile is refused where it is configured.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

MARK = "[redacted]"
MIN_SECRET = 6  # characters: a shorter configured secret would mark common words

BUILTIN = (
    r"-----BEGIN [A-Z0-9 ]+-----.*?(?:-----END [A-Z0-9 ]+-----|\Z)",  # PEM blocks
    r"(?<=[Bb]earer )[A-Za-z0-9._~+/=-]{8,}",  # bearer tokens
    r"(?<=BEARER )[A-Za-z0-9._~+/=-]{8,}",
    r"\bsk-[A-Za-z0-9_-]{16,}",  # OpenAI and others' secret keys
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bxox[abeprs]-[A-Za-z0-9-]{10,}",  # Slack tokens
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}",  # JWTs
    r"(?<=://)[^:/@\s]+:[^@/\s]+(?=@)",  # user:password@ in a URL
)


class Redactor:
    def __init__(self, secrets: Iterable[str] = (), patterns: Iterable[str] = ()) -> None:
        own = sorted({s for s in secrets if s and len(s) >= MIN_SECRET}, key=len, reverse=True)
        parts = [*BUILTIN, *(re.escape(s) for s in own), *patterns]
        self._re = re.compile("|".join(f"(?:{p})" for p in parts), re.DOTALL)

    def text(self, value: str) -> str:
        return self._re.sub(MARK, value)

    def value(self, value: Any) -> Any:
        """`value` with every string in it redacted (dicts, lists and tuples walked)."""
        if isinstance(value, str):
            return self._re.sub(MARK, value)
        if isinstance(value, Mapping):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def event(self, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for key, value in event.items():
            if isinstance(value, str):
                event[key] = self._re.sub(MARK, value)
            elif isinstance(value, Mapping | list | tuple):
                event[key] = self.value(value)
        return event


def check_pattern(pattern: str) -> str:
    """`pattern` if it compiles, else ValueError saying why (for the configuration)."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"redact pattern {pattern!r} does not compile: {exc}") from exc
    return pattern


_active = Redactor()


def configure(secrets: Iterable[str] = (), patterns: Iterable[str] = ()) -> None:
    """The secrets and patterns of the configuration (at start and on a reload)."""
    global _active
    _active = Redactor(secrets, patterns)


def text(value: str) -> str:
    """`value` redacted with the configured redactor."""
    return _active.text(value)


def active() -> Redactor:
    return _active
