"""Timers and their firings; the decisions are `core/timers.py`.

A firing is one transaction: the `timer_firings` row named `timer:<timer>:<n>`, the
queue item (source `timer`, mode `followup`, the timer's text), and the timer's
`fired` / `next_at` update. A crash keeps all three or none, so each due time fires
exactly once, and the firing's primary key makes a re-run of the same firing a no-op.
A missed due time fires once when next looked at: `fire_due` takes the timers due at
`now` in due order, at most `limit` in one transaction. `fire_one` fires one named
timer by the same rules, for a runtime that keeps each timer's sleep itself (a
Temporal timer workflow): only when it is live and due, saying when it is next due,
so a caller woken early or late just sleeps again or fires once.

A timer names a session that exists (by label or alias), except a `system:<purpose>`
label, which `add` creates: a row of `sessions` of kind `system`, origin `operator`,
with no entity and no channel.
"""

from __future__ import annotations

import sqlite3

import orjson

from core import timers as core
from ledger.closing import refuse_closed
from ledger.items import load_item
from ledger.port.errors import NotFound
from ledger.port.records import ItemInfo, OneTimer, TimerInfo
from ledger.recent import block_of
from plumbing.ids import new_id

_COLUMNS = "id, session_label, text, next_at, every_ms, fired"


def _info(row: tuple[str, str, str, int | None, int | None, int]) -> TimerInfo:
    timer, session, text, next_at, every_ms, fired = row
    return TimerInfo(
        timer, session, text, next_at, None if every_ms is None else every_ms / 1000, fired
    )


def _owner(conn: sqlite3.Connection, name: str, now: int) -> str:
    """The session a timer for `name` belongs to."""
    if conn.execute("SELECT 1 FROM sessions WHERE label = ?", (name,)).fetchone() is not None:
        return name
    alias = conn.execute(
        "SELECT session_label FROM session_aliases WHERE alias = ?", (name,)
    ).fetchone()
    if alias is not None:
        return str(alias[0])
    if not core.is_system_label(name):
        raise NotFound(
            f"no session or alias {name!r} (only system:<purpose> sessions are made by a timer)",
            field="session",
        )
    conn.execute(
        "INSERT INTO sessions (label, kind, origin, status, created_at, updated_at,"
        " updated_block) VALUES (?, 'system', 'operator', 'active', ?, ?, ?)",
        (name, now, now, block_of(now)),
    )
    return name


def add(conn: sqlite3.Connection, session: str, spec: core.TimerSpec, now: int) -> TimerInfo:
    label = _owner(conn, session, now)
    refuse_closed(conn, label, "session")
    timer = f"tmr_{new_id()}"
    conn.execute(
        "INSERT INTO timers (id, session_label, text, first_at, every_ms, next_at, fired,"
        " status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 0, 'live', ?, ?)",
        (timer, label, spec.text, spec.first_at, spec.every_ms, spec.first_at, now, now),
    )
    return TimerInfo(
        timer,
        label,
        spec.text,
        spec.first_at,
        None if spec.every_ms is None else spec.every_ms / 1000,
        0,
    )


def list_live(conn: sqlite3.Connection, session: str | None) -> list[TimerInfo]:
    """Live timers, soonest first; of one session (label or alias) if named."""
    if session is None:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM timers WHERE status = 'live' ORDER BY next_at, id"
        ).fetchall()
        return [_info(r) for r in rows]
    label = session
    if conn.execute("SELECT 1 FROM sessions WHERE label = ?", (session,)).fetchone() is None:
        alias = conn.execute(
            "SELECT session_label FROM session_aliases WHERE alias = ?", (session,)
        ).fetchone()
        if alias is None:
            raise NotFound(f"no session or alias {session!r}", field="session")
        label = str(alias[0])
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM timers WHERE status = 'live' AND session_label = ?"
        " ORDER BY next_at, id",
        (label,),
    ).fetchall()
    return [_info(r) for r in rows]


def cancel(conn: sqlite3.Connection, timer: str, now: int) -> None:
    done = conn.execute(
        "UPDATE timers SET status = 'cancelled', next_at = NULL, updated_at = ?"
        " WHERE id = ? AND status = 'live'",
        (now, timer),
    )
    if done.rowcount == 0:
        raise NotFound(f"no live timer {timer!r}", field="timer")


def next_due(conn: sqlite3.Connection) -> int | None:
    """The earliest due time of a live timer, or None when none is live."""
    row = conn.execute("SELECT min(next_at) FROM timers WHERE status = 'live'").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def fire_due(conn: sqlite3.Connection, now: int, limit: int) -> list[ItemInfo]:
    """Fire up to `limit` timers due at `now`; the items they queued."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM timers"
        " WHERE status = 'live' AND next_at <= ? ORDER BY next_at, id LIMIT ?",
        (now, limit),
    ).fetchall()
    items: list[ItemInfo] = []
    for row in rows:
        items.extend(_fire(conn, row, now))
    return items


def fire_one(conn: sqlite3.Connection, timer: str, now: int) -> OneTimer:
    """Fire one timer if it is due at `now`, as `fire_due` would."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM timers WHERE id = ? AND status = 'live'", (timer,)
    ).fetchone()
    if row is None:
        return OneTimer([], None)
    if row[3] > now:
        return OneTimer([], int(row[3]))
    items = _fire(conn, row, now)
    after = conn.execute(
        "SELECT next_at FROM timers WHERE id = ? AND status = 'live'", (timer,)
    ).fetchone()
    return OneTimer(items, None if after is None else int(after[0]))


def _fire(
    conn: sqlite3.Connection, row: tuple[str, str, str, int, int | None, int], now: int
) -> list[ItemInfo]:
    """One due timer's firing; its item, if this firing was not filed before."""
    timer, session, text, next_at, every_ms, fired = row
    firing = core.fire(next_at, every_ms, fired, now)
    assert firing is not None  # the callers chose due timers only
    name = core.msg_id(timer, firing.n)
    item_id = new_id()
    filed = conn.execute(
        "INSERT INTO timer_firings (msg_id, timer_id, n, item_id, due_at, fired_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (msg_id) DO NOTHING",
        (name, timer, firing.n, item_id, firing.due_at, now),
    )
    items: list[ItemInfo] = []
    if filed.rowcount:
        payload = orjson.dumps(
            {"text": text, "msg_id": name, "timer": timer, "due_at": firing.due_at}
        ).decode()
        conn.execute(
            "INSERT INTO queue_items (id, session_label, source, mode, payload,"
            " created_at, updated_at) VALUES (?, ?, 'timer', 'followup', ?, ?, ?)",
            (item_id, session, payload, now, now),
        )
        items.append(load_item(conn, item_id))
    conn.execute(
        "UPDATE timers SET fired = ?, next_at = ?, status = ?, updated_at = ? WHERE id = ?",
        (
            firing.n,
            firing.next_at,
            "live" if firing.next_at is not None else "done",
            now,
            timer,
        ),
    )
    return items
