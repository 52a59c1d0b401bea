"""Who a session is with, for the operator's reads (`sessions.list`, `session.show`):
the person its owner is (the canonical entity of its DM session, followed through
forks and workers: core/bindings.py), their name and where they write from.

The name is the entity's own, else the display name their latest contact gave;
the channels are every contact of the entity and of the entities merged into it.
A session no person owns (a group's, a system one) has no person.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ledger.bindings import session_owner

_FAMILY = (
    "WITH RECURSIVE family(id) AS (SELECT ? UNION"
    " SELECT e.id FROM entities e JOIN family f ON e.merged_into = f.id)"
)
_CONTACTS = (
    f"{_FAMILY} SELECT c.channel, c.sender_id, c.display_name FROM contacts c"
    " JOIN family f ON c.entity_id = f.id ORDER BY c.created_at, c.channel, c.sender_id"
)


def person(conn: sqlite3.Connection, label: str) -> dict[str, Any] | None:
    """`{"entity", "name", "channels": ["<channel>:<sender_id>", ...]}` or None."""
    owner = session_owner(conn, label)
    if owner is None or owner[0] != "entity":
        return None
    entity = owner[1]
    row = conn.execute("SELECT name FROM entities WHERE id = ?", (entity,)).fetchone()
    contacts = conn.execute(_CONTACTS, (entity,)).fetchall()
    shown = [str(c[2]) for c in contacts if c[2]]
    name = row[0] if row is not None and row[0] else (shown[-1] if shown else None)
    return {"entity": entity, "name": name, "channels": [f"{c[0]}:{c[1]}" for c in contacts]}
