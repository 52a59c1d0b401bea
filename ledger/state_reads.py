"""`session.state`: the state record of a session's current thread, with its session
section (ledger/state_records.py keeps the record per turn).

The stored row is already the record as JSON (`session_state.to_json`): the op sends
it on as it is read, with the session section added, and builds no record objects (a
turn from before the table is worked out as the port's `state_record` does).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from core.session_state import to_json
from ledger.port.errors import NotFound
from ledger.queries import resolve_for_show
from ledger.state_records import state_at, thread_seed


def session_state_json(conn: sqlite3.Connection, name: str) -> dict[str, Any]:
    """`session.state`'s data: the record of the current thread of the session `name`
    (a label or an alias), with its session section (id, head, model, counts)."""
    label = resolve_for_show(conn, name)
    row = conn.execute(
        "SELECT s.head_turn_id, t.state FROM sessions s"
        " LEFT JOIN turn_state t ON t.turn_id = s.head_turn_id WHERE s.label = ?",
        (label,),
    ).fetchone()
    if row is None:
        raise NotFound(f"no session {name!r}", field="session")
    head, stored = row
    if stored is not None:
        data: dict[str, Any] = orjson.loads(stored)
    else:  # an empty thread (what a rollover carried over), or a turn from before 0009
        data = to_json(thread_seed(conn, label) if head is None else state_at(conn, head))
    data["session"] = {"id": label, "head": head, "model": data["model"], **data["counts"]}
    return data
