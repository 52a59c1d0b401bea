"""Chat commands in inbound text: parsed here, pure; applied by the actor.

`/queue <mode> [debounce:<ms>] [cap:<n>] [drop:old|new|summarize]`, `/queue reset`,
`/stop`, `/status`, `/new` (and its alias `/reset`), `/compact [instructions]`,
`/fork`, `/switch <label>`, `/merge yes|no N` (an owner decides a merge proposal),
`/help` (always allowed: it lists the commands the route allows, and changes
nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio

from core.queue_machine import QUEUE_MODES
from ledger.port.records import ItemInfo

COMMANDS = (
    "queue",
    "stop",
    "status",
    "new",
    "reset",
    "compact",
    "fork",
    "switch",
    "merge",
    "help",
)
ALIASES = {"reset": "new"}  # allowed, answered and applied as the command it names
BINDING = frozenset({"fork", "switch"})  # answered from their transaction (chat.py)
DROPS = ("old", "new", "summarize")
USAGE = {  # what /help says of each command, in this order
    "status": "/status: what the session is doing, what waits, tokens used",
    "stop": "/stop: stop the reply being written",
    "queue": "/queue <mode> [debounce:<ms>] [cap:<n>] [drop:old|new|summarize], /queue reset:"
    " how your messages queue while a reply is written",
    "new": "/new (or /reset): start a new conversation thread",
    "compact": "/compact [instructions]: summarize older turns now",
    "fork": "/fork: branch this conversation into a new session and go on there",
    "switch": "/switch <label>: go on in another of your sessions",
    "merge": "/merge yes N, /merge no N: accept or reject merge proposal N",
}
OWNERS_ONLY = frozenset({"merge"})  # allowed only to the route's owners


def help_text(allowed: frozenset[str]) -> str:
    """/help's answer: the commands `allowed` (a route's), one a line."""
    lines = [USAGE[name] for name in USAGE if name in allowed]
    lines.append("/help: this list")
    return "Commands here:\n" + "\n".join(lines)


class CommandError(ValueError):
    """The command is malformed; the message says how to write it."""


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    args: str
    override: dict[str, Any] | None = None  # for /queue; {} means reset


class CompactRequest:
    """Manual compaction (`/compact`, `session.compact`), run between turns."""

    def __init__(self, instructions: str | None) -> None:
        self.instructions = instructions
        self.done = anyio.Event()
        self.turn: str | None = None  # the compaction's, once done; None: nothing to compact


def split_commands(items: list[ItemInfo]) -> tuple[list[ItemInfo], list[ItemInfo]]:
    """Recovered items: (the rest, the chat commands among them). A command cut off
    between its ack and its reply is still a command."""
    commands = [i for i in items if is_chat_command(i)]
    return [i for i in items if i not in commands], commands


def is_chat_command(item: ItemInfo) -> bool:
    """Is the item a person's chat command (well-formed or not)?"""
    return item.source == "person" and is_command(item.text or "")


def is_command(text: str) -> bool:
    """Does the text name a chat command (well-formed or not)?"""
    stripped = text.lstrip()
    if not stripped.startswith("/"):
        return False
    return stripped[1:].split(" ", 1)[0].lower() in COMMANDS


def parse(text: str) -> Command | None:
    """A chat command, or None when the text is an ordinary message."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    head, _, rest = stripped[1:].partition(" ")
    name = head.lower()
    if name not in COMMANDS:
        return None
    name = ALIASES.get(name, name)
    rest = rest.strip()
    if name == "queue":
        return Command(name, rest, parse_queue(rest))
    return Command(name, rest)


def parse_queue(args: str) -> dict[str, Any]:
    words = args.split()
    if not words:
        raise CommandError(
            "usage: /queue <mode> [debounce:<ms>] [cap:<n>] [drop:old|new|summarize]"
            " or /queue reset"
        )
    if words[0].lower() == "reset":
        return {}
    mode = words[0].lower()
    if mode not in QUEUE_MODES:
        raise CommandError(f"unknown queue mode {mode!r}; use one of {', '.join(QUEUE_MODES)}")
    out: dict[str, Any] = {"mode": mode}
    for word in words[1:]:
        key, sep, value = word.partition(":")
        if not sep:
            raise CommandError(f"expected key:value, got {word!r}")
        out.update(_option(key.lower(), value))
    return out


def _option(key: str, value: str) -> dict[str, Any]:
    if key == "drop":
        if value not in DROPS:
            raise CommandError(f"drop must be one of {', '.join(DROPS)}")
        return {"drop": value}
    if key in ("debounce", "cap"):
        number = value.removesuffix("ms") if key == "debounce" else value
        if not number.isdigit() or (key == "cap" and int(number) < 1):
            raise CommandError(f"{key} needs a positive whole number, got {value!r}")
        return {"debounce_ms" if key == "debounce" else "cap": int(number)}
    raise CommandError(f"unknown option {key!r}; use debounce, cap or drop")
