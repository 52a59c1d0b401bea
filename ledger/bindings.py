"""Route bindings in the ledger: which session a conversation talks to, when not its own.

The rules are `core/bindings.py`'s; this module reads and writes the
`route_bindings` table and walks sessions and entities for them. The writer jobs
that bind and unbind are `ledger/binding_jobs.py`.

Ingest asks `bound_session` on its slow path only, inside its own transaction: a
route it has seen is answered from its cache, so every write of a binding clears the
cached routes (`forget_routes`) in the transaction that makes it. A binding row is
replaced, never edited: `/switch` and `route.bind` write the whole row,
`route.unbind` deletes it.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from core.bindings import BoundBy, Conversation, Owner, SessionLink, bound_label, owner_of
from core.identity import SessionRef, chain_to_root


def session_ref(conn: sqlite3.Connection, label: str) -> SessionRef | None:
    row = conn.execute(
        "SELECT label, status, merged_into FROM sessions WHERE label = ?", (label,)
    ).fetchone()
    return None if row is None else SessionRef(row[0], row[1], row[2])


def bound_session(conn: sqlite3.Connection, conversation: Conversation) -> str | None:
    """The session a binding sends this conversation to, or None (route as usual)."""
    row = conn.execute(
        "SELECT session_label FROM route_bindings WHERE channel = ? AND peer_kind = ?"
        " AND peer_id = ? AND thread_id = ?",
        conversation.key(),
    ).fetchone()
    if row is None:
        return None
    return bound_label(session_ref(conn, str(row[0])), lambda s: session_ref(conn, s))


def store(
    conn: sqlite3.Connection, conversation: Conversation, session: str, by: BoundBy, now: int
) -> None:
    conn.execute(
        "INSERT INTO route_bindings (channel, peer_kind, peer_id, thread_id,"
        " session_label, bound_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (channel, peer_kind, peer_id, thread_id) DO UPDATE SET"
        " session_label = excluded.session_label, bound_by = excluded.bound_by,"
        " created_at = excluded.created_at",
        (*conversation.key(), session, by, now),
    )
    forget_routes(conn)


def delete(conn: sqlite3.Connection, conversation: Conversation) -> str | None:
    """Remove the binding; the session it led to, or None when there was none."""
    row = conn.execute(
        "DELETE FROM route_bindings WHERE channel = ? AND peer_kind = ? AND peer_id = ?"
        " AND thread_id = ? RETURNING session_label",
        conversation.key(),
    ).fetchone()
    forget_routes(conn)
    return None if row is None else str(row[0])


def forget_routes(conn: sqlite3.Connection) -> None:
    """The cache lives on the writer's connection (ledger/ingest.py), which is
    named here by what it carries so that ingest may import this module."""
    identity: Any = getattr(conn, "identity", None)
    if identity is not None:
        identity.routes.clear()


def bindings_of(conn: sqlite3.Connection, session: str | None) -> list[dict[str, Any]]:
    sql = (
        "SELECT channel, peer_kind, peer_id, thread_id, session_label, bound_by, created_at"
        " FROM route_bindings"
    )
    rows = conn.execute(
        sql + (" WHERE session_label = ?" if session else "") + " ORDER BY created_at",
        (session,) if session else (),
    ).fetchall()
    keys = ("channel", "peer_kind", "peer_id", "thread_id", "session", "bound_by", "created_at")
    out = [dict(zip(keys, r, strict=True)) for r in rows]
    for b in out:
        b["thread_id"] = b["thread_id"] or None
    return out


# -- owners (core/bindings.py) --------------------------------------


def session_link(conn: sqlite3.Connection, label: str) -> SessionLink | None:
    row = conn.execute(
        "SELECT label, kind, entity_id, parent_session FROM sessions WHERE label = ?", (label,)
    ).fetchone()
    return None if row is None else SessionLink(row[0], row[1], row[2], row[3])


def entity_root(conn: sqlite3.Connection, entity: str) -> str:
    def parent(e: str) -> str | None:
        row = conn.execute("SELECT merged_into FROM entities WHERE id = ?", (e,)).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    return chain_to_root(entity, parent)[-1]


def session_owner(conn: sqlite3.Connection, label: str) -> Owner | None:
    return owner_of(label, lambda s: session_link(conn, s), lambda e: entity_root(conn, e))


def contact_owner(conn: sqlite3.Connection, channel: str, sender_id: str) -> Owner | None:
    row = conn.execute(
        "SELECT entity_id FROM contacts WHERE channel = ? AND sender_id = ?", (channel, sender_id)
    ).fetchone()
    return None if row is None else ("entity", entity_root(conn, str(row[0])))
