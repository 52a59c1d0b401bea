"""Turn events across sessions, and the scratchpad.

A scratchpad merge that would leave the pad over `SCRATCHPAD_MAX_BYTES` (as JSON) is
refused whole (`invalid` on `patch`) and changes nothing: the limit of the
`scratchpad.merge` op and of the agents' `scratchpad_merge` tool alike.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from core.session_state import merge_patch
from ledger.erased import refuse_erased
from ledger.port.errors import Conflict, NotFound
from ledger.port.records import TOTALS

SCRATCHPAD_MAX_BYTES = 64 << 10


def query(
    conn: sqlite3.Connection,
    *,
    kind: str | None,
    session: str | None,
    turn: str | None,
    text: str | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Newest first. `text` matches anywhere in the payload, case-insensitively."""
    where, args = [], []
    for column, value in (("type", kind), ("session_label", session), ("turn_id", turn)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    if text:
        where.append("instr(lower(payload), lower(?)) > 0")
        args.append(text)
    sql = (
        "SELECT turn_id, seq, session_label, type, payload, created_at, session_seq"
        " FROM turn_events"
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY created_at DESC, turn_id DESC, seq DESC LIMIT ?"
    return [
        {
            "turn": r[0],
            "seq": r[1],
            "session": r[2],
            "type": r[3],
            "payload": orjson.loads(r[4]),
            "at": r[5],
            "session_seq": r[6],
        }
        for r in conn.execute(sql, (*args, limit))
    ]


def session_totals(conn: sqlite3.Connection, label: str) -> dict[str, int]:
    names = TOTALS
    row = conn.execute(
        f"SELECT {', '.join('total_' + n for n in names)} FROM sessions WHERE label = ?",
        (label,),
    ).fetchone()
    if row is None:
        raise NotFound(f"no session {label!r}", field="session")
    return dict(zip(names, (int(v) for v in row), strict=True))


def scratchpad_get(conn: sqlite3.Connection, label: str) -> Any:
    if conn.execute("SELECT 1 FROM sessions WHERE label = ?", (label,)).fetchone() is None:
        raise NotFound(f"no session {label!r}", field="session")
    row = conn.execute("SELECT state FROM scratchpad WHERE session_label = ?", (label,)).fetchone()
    return orjson.loads(row[0]) if row else {}


def stored_scratchpad(conn: sqlite3.Connection, label: str) -> tuple[str, int] | tuple[()]:
    """The scratchpad's JSON as stored and when it was merged, or () if never written."""
    row = conn.execute(
        "SELECT state, updated_at FROM scratchpad WHERE session_label = ?", (label,)
    ).fetchone()
    return (str(row[0]), int(row[1])) if row else ()


def scratchpad_merge(conn: sqlite3.Connection, label: str, patch: dict[str, Any], now: int) -> Any:
    refuse_erased(conn, label, "session")
    merged = merge_patch(scratchpad_get(conn, label), patch)
    state = orjson.dumps(merged)
    if len(state) > SCRATCHPAD_MAX_BYTES:  # refused whole
        raise Conflict(
            f"the scratchpad would be {len(state)} bytes as JSON; at most"
            f" {SCRATCHPAD_MAX_BYTES} (remove entries with null)",
            field="patch",
        )
    conn.execute(
        "INSERT INTO scratchpad (session_label, state, updated_at) VALUES (?, ?, ?)"
        " ON CONFLICT (session_label) DO UPDATE SET state = excluded.state,"
        " updated_at = excluded.updated_at",
        (label, state.decode(), now),
    )
    return merged
