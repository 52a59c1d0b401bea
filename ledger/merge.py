"""Entity merge and its propagation to DM sessions, in one transaction.

Merging joins two union-find sets; the root of `into`'s set stays the canonical root
of the joined set (core/identity.py), and merging two entities already in one set
only re-asserts the aliases. A root that is a bare `contact` takes the name and kind
of a person (or org) linked under it, so a person named before keeps their name.
Histories are never merged: among the
set's active DM sessions the one with the most turns (then the latest activity)
becomes primary, and the others are marked `merged` into it and stop receiving
messages, their turns staying where they are. Every entity of the set gets the alias
`dm:<entity>` pointing at the primary, and aliases that pointed at a demoted session
are re-pointed, so any contact of the set reaches the primary on its next message.

Each session it demotes leaves the primary a bridge note (ledger/bridges.py). The
sessions are demoted oldest first (then by label), so the notes' ids, and their order
in the primary's next context, never follow an engine's row order (PostgreSQL moves
an updated row to the end of its table).
"""

from __future__ import annotations

import sqlite3

from core.identity import DM_TEMPLATE, DmCandidate, link_roots, pick_primary
from ledger.bridges import record_bridges
from ledger.erased import refuse_erased_entity
from ledger.ingest import IdentityCache, find_root, identity_of
from ledger.port.errors import NotFound
from ledger.port.records import MergeResult
from ledger.recent import block_of


def merge_job(conn: sqlite3.Connection, src: str, into: str, now: int) -> MergeResult:
    """The writer job for `entity.merge`."""
    return merge_entities(conn, identity_of(conn), src, into, now)


def merge_entities(
    conn: sqlite3.Connection, cache: IdentityCache, src: str, into: str, now: int
) -> MergeResult:
    for entity, field in ((src, "from"), (into, "into")):
        if conn.execute("SELECT 1 FROM entities WHERE id = ?", (entity,)).fetchone() is None:
            raise NotFound(f"no entity {entity!r}", field=field)
        refuse_erased_entity(conn, entity, field)
    cache.clear_resolution()
    root = find_root(conn, cache, into)
    link = link_roots(find_root(conn, cache, src), root)
    if link is not None:
        root, child = link
        conn.execute("UPDATE entities SET merged_into = ? WHERE id = ?", (root, child))
        named = conn.execute("SELECT name, kind FROM entities WHERE id = ?", (child,)).fetchone()
        if named[1] != "contact":  # a person or org joining a bare contact keeps its name
            conn.execute(
                "UPDATE entities SET name = ?, kind = ? WHERE id = ? AND kind = 'contact'",
                (named[0], named[1], root),
            )
        cache.clear_resolution()
    members = set_members(conn, root)
    primary, demoted = _propagate(conn, members, now)
    aliases, bridges = [], {}
    if primary is not None:
        bridges = record_bridges(conn, primary, demoted, now)
        aliases = [
            (str(r[0]), str(r[1]))
            for r in conn.execute(
                "SELECT alias, session_label FROM session_aliases WHERE session_label = ?"
                " ORDER BY alias",
                (primary,),
            )
        ]
    return MergeResult(root, primary, aliases, bridges)


def set_members(conn: sqlite3.Connection, root: str) -> list[str]:
    rows = conn.execute(
        "WITH RECURSIVE m(id) AS (SELECT ? UNION SELECT e.id FROM entities e JOIN m"
        " ON e.merged_into = m.id) SELECT id FROM m ORDER BY id",
        (root,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def _propagate(
    conn: sqlite3.Connection, members: list[str], now: int
) -> tuple[str | None, list[str]]:
    """The primary DM session of the set, and the sessions demoted into it now."""
    marks = ",".join("?" * len(members))
    rows = conn.execute(
        f"SELECT s.label, s.turns, max(s.updated_at, coalesce((SELECT q.created_at FROM"
        f" queue_items q WHERE q.session_label = s.label AND q.status IN ('queued', 'running')"
        f" ORDER BY q.seq DESC LIMIT 1), 0))"
        f" FROM sessions s WHERE s.kind = 'dm' AND s.status = 'active'"
        f" AND s.entity_id IN ({marks}) ORDER BY s.created_at, s.label",
        members,
    ).fetchall()
    if not rows:
        return None, []
    primary = pick_primary(DmCandidate(str(r[0]), int(r[1]), int(r[2])) for r in rows)
    demoted = [str(r[0]) for r in rows if r[0] != primary]
    for label in demoted:
        conn.execute(
            "UPDATE sessions SET status = 'merged', merged_into = ?, updated_at = ?,"
            " updated_block = ? WHERE label = ?",
            (primary, now, block_of(now), label),
        )
        conn.execute(
            "UPDATE session_aliases SET session_label = ? WHERE session_label = ?",
            (primary, label),
        )
        conn.execute(
            "INSERT INTO session_history (session_label, turn_id, prev_turn_id, reason, changed_at)"
            " SELECT label, head_turn_id, head_turn_id, 'merge', ? FROM sessions WHERE label = ?",
            (now, label),
        )
    conn.executemany(
        "INSERT INTO session_aliases (alias, session_label, reason, created_at)"
        " VALUES (?, ?, 'identity_merge', ?)"
        " ON CONFLICT(alias) DO UPDATE SET session_label = excluded.session_label",
        [
            (DM_TEMPLATE.format(entity=e), primary, now)
            for e in members
            if DM_TEMPLATE.format(entity=e) != primary
        ],
    )
    return primary, demoted
