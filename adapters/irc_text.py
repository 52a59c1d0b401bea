"""IRC lines in and out, without I/O: parsing, msg ids, mentions, splitting.

Parsing uses the `irc` library's pieces (its line grammar, `Arguments`,
`Tag`, `NickMask`); the transport is the adapter's own (adapters/irc.py).

A msg id is a hash of the server time (IRCv3 `server-time` when the server sends it,
else the adapter's clock when the line was read), the sender's nick, the target and
the text: IRC keeps no history and has no ids of its own, and the adapter spools each
message with its id (adapters/position.py), so a restart resends the same id. A reply
is split into PRIVMSG lines of at most `max_bytes` of UTF-8 text, at word boundaries
where a word fits, never inside a character; the text's own line breaks are kept, and
no character of the text is dropped except the spaces a split falls on.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from irc.client import NickMask
from irc.message import Arguments, Tag

# The `irc` library's own grammar for one line (irc.client._rfc_1459_command_regexp).
_LINE = re.compile(
    r"^(@(?P<tags>[^ ]*) )?(:(?P<prefix>[^ ]+) +)?(?P<command>[^ ]+)( *(?P<argument> .+))?"
)
CHANNEL_PREFIXES = "#&+!"


class MalformedLine(ValueError):
    """A line from the server that is not IRC."""


@dataclass(frozen=True, slots=True)
class Line:
    command: str  # upper case, or a three-digit numeric
    params: list[str]
    source: NickMask | None
    tags: dict[str, str]

    @property
    def nick(self) -> str:
        return self.source.nick if self.source is not None else ""


def parse(raw: str) -> Line:
    match = _LINE.match(raw)
    command = match.group("command") if match is not None else ""
    if not (command.isascii() and command.isalpha()) and not (
        len(command) == 3 and command.isdigit()
    ):
        raise MalformedLine(raw)  # a command is letters or a three-digit numeric
    assert match is not None  # a command was found
    prefix = match.group("prefix")
    tags = {
        str(t["key"]): "" if t["value"] is None else str(t["value"])
        for t in Tag.from_group(match.group("tags")) or ()
    }
    params = list(Arguments.from_group(match.group("argument")) or ())
    return Line(command.upper(), params, NickMask(prefix) if prefix else None, tags)


def is_channel(target: str) -> bool:
    return bool(target) and target[0] in CHANNEL_PREFIXES


def message_id(when: str, nick: str, target: str, text: str) -> str:
    """Stable for the same message, 32 hex digits."""
    digest = hashlib.sha256("\x00".join((when, nick, target.lower(), text)).encode())
    return "irc-" + digest.hexdigest()[:32]


def mentions(text: str, nick: str) -> bool:
    """Whether `text` addresses `nick` ("bot: hi", "hi bot", "@bot"), case-insensitively."""
    pattern = r"(?<![\w\-\[\]\\`^{}|])@?" + re.escape(nick) + r"(?![\w\-\[\]\\`^{}|])"
    return re.search(pattern, text, re.IGNORECASE) is not None


def split_text(text: str, max_bytes: int) -> list[str]:
    """The PRIVMSG bodies for `text`, each at most `max_bytes` of UTF-8."""
    if max_bytes < 4:
        raise ValueError("max_bytes must leave room for one character")
    out: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        out.extend(_split_line(line, max_bytes))
    return [part for part in out if part] or [""]


def _split_line(line: str, max_bytes: int) -> list[str]:
    parts: list[str] = []
    rest = line
    while len(rest.encode()) > max_bytes:
        cut = _fit(rest, max_bytes)
        space = rest.rfind(" ", 0, cut + 1)
        if space > 0:
            parts.append(rest[:space])
            rest = rest[space + 1 :]
        else:  # one word longer than a line: cut it at a character boundary
            parts.append(rest[:cut])
            rest = rest[cut:]
    parts.append(rest)
    return parts


def _fit(text: str, max_bytes: int) -> int:
    """How many characters of `text` fit in `max_bytes` of UTF-8 (at least one)."""
    size = 0
    for index, char in enumerate(text):
        size += len(char.encode())
        if size > max_bytes:
            return max(index, 1)
    return len(text)
