"""Recall's reads along a thread: the turns around a search hit, and turns by their
number within the session's thread. Beside `ledger/recall/search.py` (search) and
`ledger/recall/reads.py` (ranges by id or time, tool calls, summary).

Sync functions over a sqlite3 connection; they only read.

A thread is the chain of `parent_id` links from a head back to its root, so a hit's
neighbours are the turns it followed and the turn that followed it in its session (a
fork's turns lead back into the session it came from). A turn that lost its head
race (reason `head_moved`) is off every thread and never a neighbour. Turn numbers
count from 1 at the root of the session's current thread (`/new` starts a new one); a
negative number counts back from the head, -1 being the head itself.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace

from ledger.port.errors import NotFound
from ledger.port.records import Entry, Neighbour
from ledger.recall.reads import _entries, require_session
from ledger.sessions import thread_ids

SAID_MAX = 240  # characters of a neighbour's input and of its reply


def neighbours(
    conn: sqlite3.Connection, turn: str, session: str, before: int, after: int
) -> list[Neighbour]:
    """The `before` turns a turn followed and the `after` turns that followed it in
    `session`, nearest first on each side."""
    out: list[Neighbour] = []
    current: str | None = turn
    for step in range(1, before + 1):
        row = conn.execute("SELECT parent_id FROM turns WHERE id = ?", (current,)).fetchone()
        current = None if row is None else row[0]
        if current is None:
            break
        out.append(_neighbour(conn, current, -step))
    current = turn
    for step in range(1, after + 1):
        row = conn.execute(
            "SELECT id FROM turns WHERE parent_id = ? AND session_label = ?"
            " AND coalesce(reason, '') != 'head_moved' ORDER BY started_at, id LIMIT 1",
            (current, session),
        ).fetchone()
        if row is None:
            break
        current = str(row[0])
        out.append(_neighbour(conn, current, step))
    return out


def _neighbour(conn: sqlite3.Connection, turn: str, offset: int) -> Neighbour:
    said = conn.execute(
        "SELECT content FROM messages WHERE turn_id = ? AND role = 'user' ORDER BY seq LIMIT 1",
        (turn,),
    ).fetchone()
    output = conn.execute("SELECT output FROM turns WHERE id = ?", (turn,)).fetchone()
    return Neighbour(
        turn,
        offset,
        _short(said[0] if said else ""),
        _short(output[0] if output and output[0] else ""),
    )


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SAID_MAX else flat[: SAID_MAX - 1] + "…"


def by_number(
    conn: sqlite3.Connection, session: str, start: int | None, end: int | None, limit: int
) -> list[Entry]:
    """The entries of turns `start`..`end` (inclusive; from 1 at the root, negative
    from the head) of the session's thread, oldest first, each with its `number`; at
    most `limit` entries."""
    require_session(conn, session)
    row = conn.execute("SELECT head_turn_id FROM sessions WHERE label = ?", (session,)).fetchone()
    chain = thread_ids(conn, row[0] if row else None)
    if not chain:
        raise NotFound(f"session {session!r} has no turns yet", field="start_turn")
    first = _index(start if start is not None else 1, len(chain))
    last = _index(end, len(chain)) if end is not None else first + 9
    chosen = chain[max(first, 0) : max(last + 1, 0)]
    numbers = {t: n for n, t in enumerate(chain, start=1)}
    return [replace(e, number=numbers[e.turn]) for e in _entries(conn, chosen)][:limit]


def _index(number: int, length: int) -> int:
    """The 0-based place in the chain of turn `number`."""
    return number - 1 if number > 0 else length + number
