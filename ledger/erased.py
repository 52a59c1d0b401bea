"""Refusing writes aimed at what a running erasure covers.

From the mark of an erasure (ledger/erasure.py) to its end, nothing more is written
for the sessions and entities it covers: a write that names one is refused with
`NotFound` naming it, and changes nothing. Their rows may already be gone (the steps
remove them), so the erasure's own lists say what it covers; a session is also
known by its status, `erased` from the mark on.
"""

from __future__ import annotations

import json
import sqlite3

from ledger.port.errors import NotFound


def _covered(conn: sqlite3.Connection, column: str, value: str) -> bool:
    return any(
        value in json.loads(r[0])
        for r in conn.execute(
            f"SELECT {column} FROM erasures WHERE finished_at IS NULL AND {column} IS NOT NULL"
        )
    )


def refuse_erased(conn: sqlite3.Connection, label: str, field: str) -> str | None:
    """`NotFound` if session `label` is one a running erasure covers; else its status
    (None: no such session)."""
    row = conn.execute("SELECT status FROM sessions WHERE label = ?", (label,)).fetchone()
    if row is not None and row[0] != "erased":
        return str(row[0])
    if row is not None or _covered(conn, "sessions", label):
        raise NotFound(f"no session {label!r}: its person is being erased", field=field)
    return None


def refuse_erased_entity(conn: sqlite3.Connection, entity: str, field: str) -> None:
    """`NotFound` if `entity` is one a running erasure covers."""
    if _covered(conn, "entities", entity):
        raise NotFound(f"no entity {entity!r}: it is being erased", field=field)
