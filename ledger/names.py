"""What an operator says of people: an entity's name and kind, and manual aliases.

A name belongs to the person, so `entity.name` writes it on the canonical root of the
entity's set, the entity whose name the reads show: naming any contact of a merged
person names the person. A kind not given keeps the current one (an entity made at
first contact is a `contact` named after the sender's display name). `entity.alias` leads
a session key to an existing session (following merges to the primary) with an alias
row of reason `manual`. A key that is a session's own label cannot be an alias (the
label would win), nor can an alias that leads elsewhere be moved; the same alias to
the same session again changes nothing. Each is one writer job, and one refused
raises before it writes.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from core.identity import (
    DM_TEMPLATE,
    chain_to_root,
    check_alias,
    check_kind,
    check_name,
    resolve_label,
)
from ledger.erased import refuse_erased, refuse_erased_entity
from ledger.ingest import find_root, get_alias, get_session_ref, identity_of
from ledger.merge import set_members
from ledger.port.errors import Conflict, Invalid, NotFound


def name_entity(
    conn: sqlite3.Connection, entity: str, name: str, kind: str | None, now: int
) -> dict[str, Any]:
    """The writer job for `entity.name`: `{"entity", "name", "kind"}`, the entity named
    being the canonical root of `entity`'s set."""
    try:
        name = check_name(name)
    except ValueError as exc:
        raise Invalid(str(exc), field="name") from exc
    try:
        kind = check_kind(kind)
    except ValueError as exc:
        raise Invalid(str(exc), field="kind") from exc
    if conn.execute("SELECT 1 FROM entities WHERE id = ?", (entity,)).fetchone() is None:
        raise NotFound(f"no entity {entity!r}", field="entity")
    refuse_erased_entity(conn, entity, "entity")
    root = find_root(conn, identity_of(conn), entity)
    conn.execute(
        "UPDATE entities SET name = ?, kind = coalesce(?, kind) WHERE id = ?", (name, kind, root)
    )
    row = conn.execute("SELECT kind FROM entities WHERE id = ?", (root,)).fetchone()
    return {"entity": root, "name": name, "kind": str(row[0])}


def add_alias(conn: sqlite3.Connection, alias: str, session: str, now: int) -> dict[str, Any]:
    """The writer job for `entity.alias`: `{"alias", "session"}`, the session it leads to."""
    try:
        check_alias(alias)
    except ValueError as exc:
        raise Invalid(str(exc), field="alias") from exc
    target = resolve_label(
        session, lambda s: get_session_ref(conn, s), lambda a: get_alias(conn, a)
    ).label
    if target is None:
        raise NotFound(f"no session {session!r}", field="session")
    refuse_erased(conn, target, "session")
    if get_session_ref(conn, alias) is not None:
        raise Conflict(f"{alias!r} is a session's label, not free for an alias", field="alias")
    taken = get_alias(conn, alias)
    if taken is not None and taken != target:
        raise Conflict(f"alias {alias!r} already leads to {taken}", field="alias")
    if taken is None:
        conn.execute(
            "INSERT INTO session_aliases (alias, session_label, reason, created_at)"
            " VALUES (?, ?, 'manual', ?)",
            (alias, target, now),
        )
        identity_of(conn).clear_resolution()
    return {"alias": alias, "session": target}


def entity_show(conn: sqlite3.Connection, entity: str) -> dict[str, Any]:
    """`entity.show`, on a reader: `{"entity", "canonical", "name", "kind", "members",
    "session"}`, the name and kind being the canonical root's (the person's), `members`
    every entity of the set, `session` where their DMs go (None before the first)."""

    def parent(e: str) -> str | None:
        r = conn.execute("SELECT merged_into FROM entities WHERE id = ?", (e,)).fetchone()
        return None if r is None or r[0] is None else str(r[0])

    if conn.execute("SELECT 1 FROM entities WHERE id = ?", (entity,)).fetchone() is None:
        raise NotFound(f"no entity {entity!r}", field="entity")
    canonical = chain_to_root(entity, parent)[-1]
    name, kind = conn.execute(
        "SELECT name, kind FROM entities WHERE id = ?", (canonical,)
    ).fetchone()
    session = resolve_label(
        DM_TEMPLATE.format(entity=canonical),
        lambda k: get_session_ref(conn, k),
        lambda a: get_alias(conn, a),
    ).label
    return {
        "entity": entity,
        "canonical": canonical,
        "name": name,
        "kind": kind,
        "members": set_members(conn, canonical),
        "session": session,
    }
