"""The values the library face hands out: a session, a turn, a page of sessions,
and the encoding of items (one JSON value each) into message rows.

An item is any JSON value, stored as its JSON text, one message row each, and comes
back equal (dict keys are strings, tuples come back as lists, as with `json`). The
encoding happens in the caller before anything is queued: an item that is not
JSON-serializable raises `TypeError` naming it, and nothing of that call is stored. A
message of a turn the daemon wrote (plain text, not a library item) is read back as
`{"role": ..., "content": ...}`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

LIBRARY = "library"  # the engine name of turns written by the library face

Row = tuple[str, str]  # (role, JSON text) of one item


@dataclass(frozen=True, slots=True)
class SessionInfo:
    id: str
    title: str | None
    kind: str
    origin: str
    status: str
    turns: int
    head_turn: str | None
    metadata: dict[str, Any]
    created_at: int  # ms since the epoch
    updated_at: int
    parent_session: str | None = None
    parent_turn: str | None = None
    # The running totals of the usage its turns reported (Store.append's `usage`).
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class TurnInfo:
    id: str
    session: str  # the session that wrote it (an ancestor's, for a fork)
    type: str  # turn | compaction | ...
    items: list[Any]
    created_at: int
    prompt_tokens: int | None = None  # the usage given to Store.append, if any
    completion_tokens: int | None = None
    summary: dict[str, Any] | None = None  # what it did (core/turn_summary.py)
    metadata: dict[str, Any] | None = None  # given to Store.append, or by an engine


@dataclass(frozen=True, slots=True)
class Page:
    sessions: list[SessionInfo]
    next_cursor: str | None  # pass as `cursor` for the next page; None: the last page


def _role(item: Any) -> str:
    if isinstance(item, dict):
        for key in ("role", "type"):
            value = item.get(key)
            if isinstance(value, str) and value:
                return value[:64]
    return "item"


def encode_items(items: Sequence[Any]) -> list[Row]:
    """The rows of `items`; TypeError naming the first that cannot be stored."""
    if isinstance(items, (str, bytes, dict)):
        raise TypeError(f"items must be a list of items, not a {type(items).__name__}")
    rows = []
    for number, item in enumerate(items):
        try:
            text = orjson.dumps(item).decode()
        except TypeError as exc:
            shown = repr(item)
            shown = shown if len(shown) <= 120 else shown[:117] + "..."
            raise TypeError(
                f"item {number} ({type(item).__name__}: {shown}) is not JSON-serializable:"
                f" {exc}; nothing of this call was stored"
            ) from None
        rows.append((_role(item), text))
    return rows


def row_of_text(text: str) -> Row:
    """The row of an item already encoded as JSON `text` (encoded once, by its
    caller); ValueError if it is not JSON."""
    return _role(orjson.loads(text)), text


def encode_metadata(metadata: dict[str, Any] | None) -> str | None:
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise TypeError(f"metadata must be a dict, not a {type(metadata).__name__}")
    try:
        return orjson.dumps(metadata).decode()
    except TypeError as exc:
        raise TypeError(f"metadata is not JSON-serializable: {exc}") from None


def decode_item(engine: str | None, role: str, content: str) -> Any:
    """One stored message as an item."""
    if engine == LIBRARY:
        return orjson.loads(content)
    return {"role": role, "content": content}


TokenCount = Callable[[Any], int]


def estimate_tokens(item: Any) -> int:
    """An item's tokens as `recent` counts them unless told how: its text (a message's
    `content`, else the item as JSON) at four characters a token, rounded up. A rough
    count, the same for every model; pass a tokenizer's count for an exact one."""
    content = item.get("content") if isinstance(item, dict) else None
    text = content if isinstance(content, str) else orjson.dumps(item).decode()
    return (len(text) + 3) // 4


def within_tokens(items: list[Any], max_tokens: int | None, count: TokenCount | None) -> list[Any]:
    """The newest of `items` (oldest first) whose tokens together fit in `max_tokens`:
    taken from the newest back, stopping at the first that does not fit, so the result
    is a suffix of `items`; all of them when `max_tokens` is None."""
    if max_tokens is None:
        return items
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, not {max_tokens}")
    measure = count or estimate_tokens
    used, start = 0, len(items)
    while start > 0:
        cost = measure(items[start - 1])
        if used + cost > max_tokens:
            break
        used, start = used + cost, start - 1
    return items[start:]
