"""A person's sessions and threads, to pick one to resume (seed 003, "Session
resumption"): `person.sessions`.

A person is an entity's merged set: the sessions listed are those the set owns, as
reach counts owners (core/reach.py): the DM sessions of every member entity and the
forks made from them, newest activity first, each with its threads
(ledger/threads.py). Workers are left out: they are not conversations one resumes. A
closed session says so (`ended_at`, its closing summary) and names the session that
extends it, which is where the person's next message goes.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from core.identity import chain_to_root
from ledger.merge import set_members
from ledger.port.errors import NotFound
from ledger.threads import list_threads

COLUMNS = (
    "label, kind, origin, status, title, slug, turns, created_at, updated_at, ended_at,"
    " closing_summary, extends, model, parent_session"
)


def person_sessions(conn: sqlite3.Connection, entity: str, limit: int) -> dict[str, Any]:
    """`{"entity", "canonical", "name", "sessions": [...]}`, at most `limit` sessions."""

    def parent(e: str) -> str | None:
        r = conn.execute("SELECT merged_into FROM entities WHERE id = ?", (e,)).fetchone()
        return None if r is None or r[0] is None else str(r[0])

    if conn.execute("SELECT 1 FROM entities WHERE id = ?", (entity,)).fetchone() is None:
        raise NotFound(f"no entity {entity!r}", field="entity")
    canonical = chain_to_root(entity, parent)[-1]
    (name,) = conn.execute("SELECT name FROM entities WHERE id = ?", (canonical,)).fetchone()
    members = set_members(conn, canonical)
    marks = ",".join("?" * len(members))
    found = {
        row[0]: row
        for row in conn.execute(
            f"SELECT {COLUMNS} FROM sessions WHERE entity_id IN ({marks})"
            " AND kind != 'worker' AND status != 'erased'",
            members,
        )
    }
    parents = list(found)
    while parents:  # their forks, and the forks of those
        marks = ",".join("?" * len(parents))
        forks = conn.execute(
            f"SELECT {COLUMNS} FROM sessions WHERE parent_session IN ({marks})"
            " AND origin = 'fork' AND kind != 'worker' AND status != 'erased'",
            parents,
        ).fetchall()
        parents = [r[0] for r in forks if r[0] not in found]
        found.update((r[0], r) for r in forks)
    rows = sorted(found.values(), key=lambda r: (-int(r[8]), str(r[0])))[:limit]
    return {
        "entity": entity,
        "canonical": canonical,
        "name": name,
        "sessions": [_session(conn, r) for r in rows],
    }


def _session(conn: sqlite3.Connection, row: tuple[Any, ...]) -> dict[str, Any]:
    keys = [c.strip() for c in COLUMNS.split(",")]
    out = dict(zip(keys, row, strict=True))
    out["parent"] = out.pop("parent_session")
    out["threads"] = list_threads(conn, str(row[0]))
    return out
