"""A turn's title (what it was about) and outcome (how it ended), as short lines. Pure.

A title is one line of at most `MAX_TITLE` characters, never empty: the first words
of the person's message, then, when the turn had no message of its own (a worker
result, a timer), the first line of the reply; a turn with neither is named by its
type, and a compaction is one. An engine's `intent` event with a `title` names the
turn, the latest such event winning over the mechanical title; a model's title,
written after the turn (broker/titler.py), wins over both. An outcome says the
status, and for an aborted or failed turn its reason and, when known, the error in a
few words: `completed`, `aborted (interrupt)`, `failed (timeout): the agent took too
long…`. A session's title is the first line of its first message, and its slug that
message in kebab case (ASCII, at most `MAX_SLUG` characters, cut at a word), or
`session-<8 hex digits of its label>` when the message gives fewer than 4 characters.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any, Literal

MAX_TITLE = 80
MAX_OUTCOME = 160
MAX_SLUG = 30
MIN_SLUG = 4
_NOT_SLUG = re.compile(r"[^a-z0-9]+")
COMPACTION = "Compaction of earlier turns"
TitleSource = Literal["mechanical", "engine", "model"]


def one_line(text: str, limit: int) -> str:
    """The first non-blank line of `text`, whitespace collapsed, cut at a word
    boundary to at most `limit` characters (an ellipsis marks a cut)."""
    words = ""
    for line in text.splitlines():
        words = " ".join(line.split())
        if words:
            break
    if len(words) <= limit:
        return words
    cut = words[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:  # a word boundary not too far back
        cut = cut[:space]
    return cut.rstrip(" ,.;:-") + "…"


def mechanical_title(inputs: Sequence[str], reply: str, kind: str = "turn") -> str:
    """The mechanical title. `inputs`: the texts of the turn's messages, in arrival order."""
    if kind == "compaction":  # its output is a summary of other turns, not its subject
        return COMPACTION
    for text in inputs:
        line = one_line(text, MAX_TITLE)
        if line:
            more = len([t for t in inputs if t.strip()]) - 1 if len(inputs) > 1 else 0
            if more > 0:
                suffix = f" (+{more} more)"
                return one_line(text, MAX_TITLE - len(suffix)) + suffix
            return line
    line = one_line(reply, MAX_TITLE)
    if line:
        return line
    return f"A {kind} with no text"


def engine_title(events: Iterable[tuple[str, dict[str, Any]]]) -> str | None:
    """The title of the latest `intent` event that gives one."""
    found = None
    for kind, payload in events:
        title = payload.get("title") if kind == "intent" else None
        if isinstance(title, str) and title.strip():
            found = title
    if found is None:
        return None
    return one_line(found, MAX_TITLE) or None


def turn_title(
    inputs: Sequence[str],
    reply: str,
    events: Iterable[tuple[str, dict[str, Any]]],
    kind: str = "turn",
) -> tuple[str, TitleSource]:
    """The title a turn is committed with (an intent's, else mechanical) and its source."""
    given = engine_title(events)
    if given:
        return given, "engine"
    return mechanical_title(inputs, reply, kind), "mechanical"


def outcome_line(status: str, reason: str | None, error: str | None) -> str:
    """The status, with the reason and the error in a few words when it did not complete."""
    if status == "completed":
        return "completed"
    reason = one_line(reason or "", 40)
    line = f"{status} ({reason})" if reason else status
    detail = one_line(error or "", MAX_OUTCOME - len(line) - 2)
    return f"{line}: {detail}" if detail else line


def slugify(text: str, limit: int = MAX_SLUG) -> str:
    """`text` in kebab case: ASCII letters and digits, words joined by `-`, at most
    `limit` characters, cut at a word boundary where one is near."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = _NOT_SLUG.sub("-", ascii_text.lower()).strip("-")
    if len(slug) <= limit:
        return slug
    cut = slug[: limit + 1]
    dash = cut.rfind("-")
    return (cut[:dash] if dash >= limit // 2 else slug[:limit]).strip("-")


def session_title(first_message: str) -> str | None:
    """A session's title: the first line of its first message; None when it has none."""
    return one_line(first_message, MAX_TITLE) or None


def session_slug(first_message: str, label: str) -> str:
    """A session's slug (seed 000): its first message in kebab case, else a fallback
    stable for the label."""
    slug = slugify(first_message)
    if len(slug) >= MIN_SLUG:
        return slug
    return "session-" + hashlib.blake2b(label.encode(), digest_size=4).hexdigest()
