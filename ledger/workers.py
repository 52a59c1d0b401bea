"""Worker reads: the workers a session dispatched (`workers.list`).

A worker is a dispatch (ledger/dispatch.py): its target session, the parent turn and
the broker's id of the tool call that made it (empty when an operator dispatched it),
its status (`running`, `completed`, `failed`, `timed_out`) and its task, listed
oldest first. The session is a label or an alias, and a turn must be one of that
session's; either unknown is `NotFound`, naming the argument.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ledger.port.errors import NotFound
from ledger.queries import resolve_for_show

COLUMNS = ("session", "parent_turn", "spawn_tool_call_id", "status", "task", "dispatch")


def list_workers(conn: sqlite3.Connection, session: str, turn: str | None) -> list[dict[str, Any]]:
    label = resolve_for_show(conn, session)
    sql = (
        "SELECT target_session, parent_turn_id, tool_call_id, status, task, id, created_at,"
        " completed_at FROM dispatches WHERE parent_session = ?"
    )
    args: tuple[str, ...] = (label,)
    if turn is not None:
        found = conn.execute(
            "SELECT 1 FROM turns WHERE id = ? AND session_label = ?", (turn, label)
        ).fetchone()
        if found is None:
            raise NotFound(f"no turn {turn!r} of {label}", field="turn")
        sql += " AND parent_turn_id = ?"
        args = (label, turn)
    return [
        {**dict(zip(COLUMNS, row[:6], strict=True)), "created_at": row[6], "ended_at": row[7]}
        for row in conn.execute(sql + " ORDER BY created_at, id", args)
    ]
