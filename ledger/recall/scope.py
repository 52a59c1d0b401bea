"""Which sessions a recall covers by default: the calling session and every other DM
session of the same canonical entity (after a merge, memory bridges the histories
that turn trees never merge).

The scope follows the union-find to the canonical root, then takes the DM sessions of
every entity of that set, merged ones included, as their turns stay where they were.
It never reaches a session of another entity; a session with no entity (a group, a
worker, a fork) covers itself only. The calling session comes first; the others
follow in label order.
"""

from __future__ import annotations

import sqlite3

from core.identity import chain_to_root
from ledger.merge import set_members


def entity_sessions(conn: sqlite3.Connection, label: str) -> list[str]:
    """The labels a recall from `label` covers by default."""
    row = conn.execute("SELECT entity_id FROM sessions WHERE label = ?", (label,)).fetchone()
    if row is None or row[0] is None:
        return [label]
    root = chain_to_root(str(row[0]), lambda e: _parent(conn, e))[-1]
    members = set_members(conn, root)
    marks = ",".join("?" * len(members))
    others = conn.execute(
        f"SELECT label FROM sessions WHERE kind = 'dm' AND entity_id IN ({marks})"
        " AND label != ? ORDER BY label",
        (*members, label),
    ).fetchall()
    return [label, *(str(r[0]) for r in others)]


def _parent(conn: sqlite3.Connection, entity: str) -> str | None:
    row = conn.execute("SELECT merged_into FROM entities WHERE id = ?", (entity,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])
