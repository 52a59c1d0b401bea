"""The console's bearer tokens and the roles they carry, read from `token_file` at start.

The file holds one token a line, "<role> <token>" or a bare token (admin);
blank lines and lines starting with "#" are skipped. It must exist and be
readable by its owner alone: a file others may read or write is refused, as
is one without a token. A token is compared in constant time with every
known token, and the role of a request is the one its token's line gave.
"""

from __future__ import annotations

import hmac
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Role = Literal["read", "operate", "admin"]
ROLES: tuple[Role, ...] = ("read", "operate", "admin")  # each may do what those before may
MIN_TOKEN_CHARS = 16


class TokenFileError(Exception):
    """The token file cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class Tokens:
    entries: tuple[tuple[bytes, Role], ...]

    def role_of(self, token: str | None) -> Role | None:
        if not token:
            return None
        given = token.encode()
        found: Role | None = None
        for known, role in self.entries:  # all of them: the time says nothing of which
            if hmac.compare_digest(known, given):
                found = role
        return found


def allows(role: Role, needed: Role) -> bool:
    return ROLES.index(role) >= ROLES.index(needed)


def parse(text: str) -> Tokens:
    entries: list[tuple[bytes, Role]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) == 1:
            role, token = "admin", parts[0]
        elif len(parts) == 2 and parts[0] in ROLES:
            role, token = parts[0], parts[1]
        else:
            raise TokenFileError(f'line {number}: expected "<read|operate|admin> <token>"')
        if len(token) < MIN_TOKEN_CHARS:
            raise TokenFileError(f"line {number}: a token needs {MIN_TOKEN_CHARS} characters")
        entries.append((token.encode(), role))  # type: ignore[arg-type]
    if not entries:
        raise TokenFileError("it holds no token")
    return Tokens(tuple(entries))


def load(path: Path) -> Tokens:
    """The tokens of `path`, or TokenFileError (missing, readable by others, malformed)."""
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IROTH | stat.S_IWOTH):
            raise TokenFileError(
                f"{path} may be read or written by others (mode {stat.S_IMODE(mode):04o});"
                " chmod 600 it"
            )
        text = path.read_text()
    except FileNotFoundError as exc:
        raise TokenFileError(f"{path} does not exist") from exc
    except OSError as exc:
        raise TokenFileError(f"{path} cannot be read: {exc.strerror}") from exc
    try:
        return parse(text)
    except TokenFileError as exc:
        raise TokenFileError(f"{path}: {exc}") from exc
