"""`session.state`: the state record of a session's current thread, with its session
section (ledger/state_records.py keeps the record per turn)."""

from __future__ import annotations

import sqlite3
from typing import Any

from broker.core.session_state import SessionState, to_json

from .errors import NotFound
from .queries import resolve_for_show
from .state_records import state_at


def session_state(conn: sqlite3.Connection, name: str) -> tuple[str, str | None, SessionState]:
    """`session.state`: the session's label (`name` is a label or an alias), its head
    and the record of its current thread."""
    label = resolve_for_show(conn, name)
    row = conn.execute("SELECT head_turn_id FROM sessions WHERE label = ?", (label,)).fetchone()
    if row is None:
        raise NotFound(f"no session {name!r}", field="session")
    return label, row[0], state_at(conn, row[0])


def session_state_json(conn: sqlite3.Connection, name: str) -> dict[str, Any]:
    """`session.state`'s data: the record with its session section (id, head, model, counts)."""
    label, head, state = session_state(conn, name)
    data = to_json(state)
    data["session"] = {"id": label, "head": head, "model": state.model, **data["counts"]}
    return data
