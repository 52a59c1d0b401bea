"""The ingest transaction: one inbound message becomes a durable queue item.

Runs inside a writer job (ledger/writer/group_commit.py), so every read here sees the
writes of earlier jobs in the same batch and nothing here ever races another writer.

`(channel, msg_id)` is checked first: a repeat returns the first answer (session and
item) and writes nothing. First contact creates the entity and the contact in the
same transaction as the message, so an acked message always has both. A
conversation bound to a session (ledger/bindings.py) files its messages there,
before any session key is built, and whether the message starts a new thread first
(the reset policies: ledger/resets.py) is decided in this same transaction. A key
that leads to a closed session opens its successor instead (ledger/closing.py).

The caches only mirror committed-or-about-to-commit rows: the writer clears them
whenever anything rolls back, a merge clears the resolution caches because it changes
where keys lead, and writing a binding clears the cached routes, so only a route's
first message pays for the lookup.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from core.bindings import Conversation
from core.closing import successor
from core.identity import (
    Route,
    SessionRef,
    SessionSpec,
    build_session_key,
    chain_to_root,
    resolve_label,
)
from core.titles import session_slug, session_title
from ledger.bindings import bound_session
from ledger.closing import held
from ledger.port.records import Accepted, InboundRecord
from ledger.recent import block_of
from ledger.resets import on_person_message
from ledger.state_records import LastRecords
from plumbing.ids import new_entity_id, new_id

CACHE_LIMIT = 200_000


class IdentityCache:
    """Writer-thread caches for contact, root and session-key lookups."""

    def __init__(self) -> None:
        self.contacts: dict[tuple[str, str], str] = {}
        self.roots: dict[str, str] = {}
        self.sessions: dict[str, str] = {}
        # The whole answer for a route seen before: (entity, root, session).
        self.routes: dict[tuple[str | None, ...], tuple[str, str, str]] = {}

    def clear(self) -> None:
        self.contacts.clear()
        self.clear_resolution()

    def clear_resolution(self) -> None:
        self.roots.clear()
        self.sessions.clear()
        self.routes.clear()

    def trim(self) -> None:
        for cache in (self.contacts, self.roots, self.sessions, self.routes):
            if len(cache) > CACHE_LIMIT:
                cache.clear()


class WriterCaches:
    """The writer's connection, carrying the caches that mirror what it wrote.

    The caches live wherever the connection lives (a worker thread or the
    writer process), so jobs reach them through the connection they are given.
    A mixin, so that the same caches ride on SQLCipher's connection class
    (`ledger.db.connect` with a key).
    """

    identity: IdentityCache
    last_records: LastRecords

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.identity = IdentityCache()
        self.last_records = LastRecords()  # state_records.py

    def forget(self) -> None:
        """Something rolled back: drop every cache."""
        self.identity.clear()
        self.last_records.clear()


class WriterConnection(WriterCaches, sqlite3.Connection):
    """The writer's connection to a plain ledger."""


def identity_of(conn: sqlite3.Connection) -> IdentityCache:
    """The identity cache of the writer connection `conn` (a `WriterConnection`, or
    the PostgreSQL writer's, which carries one too)."""
    identity = getattr(conn, "identity", None)
    assert isinstance(identity, IdentityCache), "identity caches live on the writer connection"
    return identity


def ingest_job(
    conn: sqlite3.Connection, rec: InboundRecord, spec: SessionSpec, now: int
) -> Accepted:
    """The writer job for one inbound message."""
    return ingest(conn, identity_of(conn), rec, spec, now)


def ingest(
    conn: sqlite3.Connection, cache: IdentityCache, rec: InboundRecord, spec: SessionSpec, now: int
) -> Accepted:
    route_key = (
        rec.channel,
        rec.sender_id,
        rec.peer_kind,
        rec.peer_id,
        rec.thread_id,
        spec.key_template,
    )
    cached = cache.routes.get(route_key)
    if cached is None:
        # Slow path: this message may create a contact, an entity or a session,
        # so check for a repeat before writing anything.
        first = _first_answer(conn, rec)
        if first is not None:
            return first
        entity = contact_entity(conn, cache, rec.channel, rec.sender_id, rec.sender_name, now)
        root = find_root(conn, cache, entity)
        # A conversation bound to a session (a fork, say) goes there before any key.
        session = bound_session(conn, _conversation(rec)) or ensure_session(
            conn,
            cache,
            build_session_key(_route(rec, root), spec.key_template),
            rec.peer_kind,
            root,
            spec.persona,
            now,
            rec.text,
        )
        cache.routes[route_key] = (entity, root, session)
    else:
        entity, root, session = cached

    item = new_id()
    cur = conn.execute(
        "INSERT INTO inbound (channel, msg_id, item_id, session_label, entity_id, sender_id,"
        " sender_name, peer_kind, peer_id, thread_id, text, ts, queue_mode, meta, received_at)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (channel, msg_id) DO NOTHING",
        (
            rec.channel,
            rec.msg_id,
            item,
            session,
            entity,
            rec.sender_id,
            rec.sender_name,
            rec.peer_kind,
            rec.peer_id,
            rec.thread_id,
            rec.text,
            rec.ts,
            rec.queue_mode,
            rec.meta,
            now,
        ),
    )
    if cur.rowcount == 0:  # a repeat, found by the unique key on the fast path
        first = _first_answer(conn, rec)
        assert first is not None
        return first
    cur = conn.execute(
        "INSERT INTO queue_items (id, session_label, source, mode, route_mode, inbound_id,"
        " created_at, updated_at) VALUES (?, ?, 'person', ?, ?, ?, ?, ?)",
        (item, session, rec.queue_mode, rec.route_mode, cur.lastrowid, now, now),
    )
    seq = int(cur.lastrowid or 0)
    thread = on_person_message(conn, session, spec.reset, item, now)  # same transaction
    cache.trim()
    return Accepted(rec.msg_id, session, item, False, seq, root, thread)


def _route(rec: InboundRecord, root: str) -> Route:
    return Route(rec.channel, rec.peer_kind, rec.peer_id, rec.thread_id, rec.sender_id, root)  # type: ignore[arg-type]


def _conversation(rec: InboundRecord) -> Conversation:
    return Conversation(rec.channel, rec.peer_kind, rec.peer_id, rec.thread_id)


def _first_answer(conn: sqlite3.Connection, rec: InboundRecord) -> Accepted | None:
    row = conn.execute(
        "SELECT session_label, item_id FROM inbound WHERE channel = ? AND msg_id = ?",
        (rec.channel, rec.msg_id),
    ).fetchone()
    return None if row is None else Accepted(rec.msg_id, row[0], row[1], True, 0, None)


def contact_entity(
    conn: sqlite3.Connection,
    cache: IdentityCache,
    channel: str,
    sender_id: str,
    sender_name: str | None,
    now: int,
) -> str:
    """The entity of a contact, creating both on first contact."""
    key = (channel, sender_id)
    entity = cache.contacts.get(key)
    if entity is not None:
        return entity
    row = conn.execute(
        "SELECT entity_id FROM contacts WHERE channel = ? AND sender_id = ?", key
    ).fetchone()
    if row is not None:
        entity = str(row[0])
    else:
        entity = new_entity_id()
        conn.execute(
            "INSERT INTO entities (id, kind, name, created_at) VALUES (?, 'contact', ?, ?)",
            (entity, sender_name or f"{channel}:{sender_id}", now),
        )
        conn.execute(
            "INSERT INTO contacts (channel, sender_id, entity_id, display_name, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (channel, sender_id, entity, sender_name, now),
        )
    cache.contacts[key] = entity
    return entity


def find_root(conn: sqlite3.Connection, cache: IdentityCache, entity: str) -> str:
    """Walk `merged_into` to the canonical root, compressing the path."""
    root = cache.roots.get(entity)
    if root is not None:
        return root
    path = chain_to_root(entity, lambda e: _parent(conn, e))
    root = path[-1]
    if len(path) > 2:
        conn.executemany(
            "UPDATE entities SET merged_into = ? WHERE id = ?", [(root, e) for e in path[:-2]]
        )
    for node in path:
        cache.roots[node] = root
    return root


def _parent(conn: sqlite3.Connection, entity: str) -> str | None:
    row = conn.execute("SELECT merged_into FROM entities WHERE id = ?", (entity,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def get_session_ref(conn: sqlite3.Connection, label: str) -> SessionRef | None:
    row = conn.execute(
        "SELECT label, status, merged_into FROM sessions WHERE label = ?", (label,)
    ).fetchone()
    return None if row is None else SessionRef(row[0], row[1], row[2])


def get_alias(conn: sqlite3.Connection, alias: str) -> str | None:
    row = conn.execute(
        "SELECT session_label FROM session_aliases WHERE alias = ?", (alias,)
    ).fetchone()
    return None if row is None else str(row[0])


def ensure_session(
    conn: sqlite3.Connection,
    cache: IdentityCache,
    key: str,
    peer_kind: str,
    entity: str,
    persona: str | None,
    now: int,
    text: str | None = None,
) -> str:
    """Resolve a session key to a label (direct, alias, then create). A session
    created here takes its title and slug from `text`, its first message."""
    label = cache.sessions.get(key)
    if label is not None:
        return label
    resolved = resolve_label(key, lambda k: get_session_ref(conn, k), lambda a: get_alias(conn, a))
    new = _NewSession(peer_kind, entity, persona, now, text or "")
    if resolved.label is None:
        label = new.create(conn, key, None)
    else:
        label = _open_successor(conn, resolved.label, new)
    cache.sessions[key] = label
    return label


@dataclass(frozen=True, slots=True)
class _NewSession:
    """What a session created by a message is made of."""

    peer_kind: str
    entity: str
    persona: str | None
    now: int
    text: str

    def create(self, conn: sqlite3.Connection, label: str, extends: str | None) -> str:
        kind = "dm" if self.peer_kind == "dm" else "group"
        conn.execute(
            "INSERT INTO sessions (label, kind, entity_id, persona, origin, status, extends,"
            " title, slug, created_at, updated_at, updated_block)"
            " VALUES (?, ?, ?, ?, 'inbound', 'active', ?, ?, ?, ?, ?, ?)",
            (
                label,
                kind,
                self.entity if kind == "dm" else None,
                self.persona,
                extends,
                session_title(self.text),
                session_slug(self.text, label),
                self.now,
                self.now,
                block_of(self.now),
            ),
        )
        return label


def _open_successor(conn: sqlite3.Connection, label: str, new: _NewSession) -> str:
    """`label`, or for a closed session the successor its messages go to now,
    created here extending the last closed one (core/closing.py)."""
    ref = get_session_ref(conn, label)
    if ref is None or ref.status != "closed":
        return label
    nxt = successor(label, lambda candidate: held(conn, candidate))
    if not nxt.create:  # an open successor, or one merged since: follow it
        found = resolve_label(
            nxt.label, lambda k: get_session_ref(conn, k), lambda a: get_alias(conn, a)
        )
        return found.label or nxt.label
    return new.create(conn, nxt.label, nxt.extends)
