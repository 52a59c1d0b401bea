"""The SQLite ledger on a temporary file: migrations, the group-commit writer,
the ingest transaction, entity merges and the operator queries."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from core.identity import SessionSpec
from ledger import queries
from ledger.db import Migration, connect, load_migrations, migrate, schema_version
from ledger.ingest import IdentityCache, contact_entity, ingest
from ledger.merge import merge_entities
from ledger.port import cipher
from ledger.port.errors import LedgerError, LedgerWriteFailed, NotFound, WriterClosed
from ledger.port.records import Accepted, InboundRecord, MergeResult
from ledger.sqlite.store import Ledger
from ledger.writer.group_commit import LedgerWriter
from ledger.writer.jobs import Pending

pytestmark = pytest.mark.anyio

T = TypeVar("T")
TABLES = (
    "entities",
    "contacts",
    "sessions",
    "session_aliases",
    "session_history",
    "inbound",
    "queue_items",
)
DEFAULT = SessionSpec(None, None)


@pytest.fixture
def plain(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A connection with one small table, for writer tests."""
    c = connect(db_path)
    c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL UNIQUE)")
    yield c
    c.close()


def values(c: sqlite3.Connection) -> list[str]:
    return [str(r[0]) for r in c.execute("SELECT v FROM t ORDER BY id")]


def insert(v: str) -> Callable[[sqlite3.Connection], int]:
    def job(c: sqlite3.Connection) -> int:
        return int(c.execute("INSERT INTO t (v) VALUES (?)", (v,)).lastrowid or 0)

    return job


def counts(c: sqlite3.Connection) -> dict[str, int]:
    return {t: int(c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES}


def tx(c: sqlite3.Connection, fn: Callable[[], T]) -> T:
    """Run `fn` in one transaction, as a writer job would."""
    c.execute("BEGIN IMMEDIATE")
    try:
        out = fn()
    except BaseException:
        c.execute("ROLLBACK")
        raise
    c.execute("COMMIT")
    return out


def rec(
    msg_id: str,
    sender: str = "alice",
    *,
    channel: str = "chat",
    peer_kind: str = "dm",
    peer_id: str | None = None,
    thread: str | None = None,
    text: str = "hi",
    mode: str | None = None,
) -> InboundRecord:
    return InboundRecord(
        channel=channel,
        msg_id=msg_id,
        sender_id=sender,
        sender_name=sender.title(),
        peer_kind=peer_kind,
        peer_id=peer_id or sender,
        thread_id=thread,
        text=text,
        ts=None,
        queue_mode=mode,
        meta=None,
    )


def put(
    c: sqlite3.Connection,
    cache: IdentityCache,
    r: InboundRecord,
    spec: SessionSpec = DEFAULT,
    now: int = 1000,
) -> Accepted:
    return tx(c, lambda: ingest(c, cache, r, spec, now))


def core(a: Accepted) -> tuple[str, str, str, bool, int, str | None]:
    """The fields every answer has (later fields may carry extra data for callers)."""
    return (a.msg_id, a.session, a.item, a.duplicate, a.seq, a.entity)


def session(c: sqlite3.Connection, label: str) -> dict[str, Any]:
    return queries.session_row(c, label)


# -- schema -----------------------------------------------------------------


def table_names(c: sqlite3.Connection) -> set[str]:
    return {str(r[0]) for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def schema(c: sqlite3.Connection) -> list[tuple[str, str]]:
    return [
        (str(r[0]), str(r[1]))
        for r in c.execute("SELECT name, sql FROM sqlite_master ORDER BY name")
    ]


def test_migrations_apply_on_a_fresh_file_and_rerun_is_a_noop(db_path: Path) -> None:
    known = load_migrations()
    c = connect(db_path)
    try:
        applied = migrate(c)
        assert applied == [f"{m.version:04d}_{m.name}" for m in known]
        assert applied[:2] == ["0001_spine", "0002_turns"]
        assert schema_version(c) == len(known)
        assert {*TABLES, "turns", "messages", "tool_calls", "outbox"} <= table_names(c)
        before = schema(c)
        assert migrate(c) == []
        assert schema(c) == before
        assert not c.in_transaction
    finally:
        c.close()
    again = connect(db_path)
    try:
        assert migrate(again) == []
        assert schema_version(again) == len(known)
    finally:
        again.close()


def test_no_two_indexes_of_a_table_cover_the_same_rows_by_the_same_columns(
    conn: sqlite3.Connection,
) -> None:
    """A second index on the same columns (and rows) only costs writes: each commit
    writes its pages to the WAL too."""
    seen: dict[tuple[str, tuple[str, ...], str | None], str] = {}
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
    for table in tables:
        for _seq, index, _unique, _origin, partial in conn.execute(
            "SELECT * FROM pragma_index_list(?)", (table,)
        ):
            columns = tuple(
                r[0] for r in conn.execute("SELECT name FROM pragma_index_info(?)", (index,))
            )
            sql = conn.execute("SELECT sql FROM sqlite_schema WHERE name = ?", (index,)).fetchone()
            where = sql[0].split(" WHERE ", 1)[1] if partial and sql and sql[0] else None
            key = (table, columns, where)
            assert key not in seen, f"{index} duplicates {seen[key]}: {key}"
            seen[key] = index
    plan = conn.execute(
        "EXPLAIN QUERY PLAN SELECT content FROM messages WHERE turn_id = ? ORDER BY seq", ("t",)
    ).fetchall()
    assert "USING INDEX" in str(plan) and "TEMP B-TREE" not in str(plan), plan


def test_connection_pragmas(conn: sqlite3.Connection) -> None:
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.isolation_level is None  # autocommit: the writer opens transactions


def test_ledger_newer_than_the_code_is_refused(db_path: Path) -> None:
    c = connect(db_path)
    try:
        too_new = len(load_migrations()) + 1
        c.execute(f"PRAGMA user_version = {too_new}")
        with pytest.raises(LedgerError, match=f"version {too_new} is newer"):
            migrate(c)
        assert schema_version(c) == too_new
        assert table_names(c) == set()  # not touched
    finally:
        c.close()


def test_failed_migration_leaves_the_schema_at_a_whole_version(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = [
        Migration(1, "good", "CREATE TABLE a (x);"),
        Migration(2, "bad", "CREATE TABLE b (x);\nINSERT INTO nowhere VALUES (1);"),
    ]
    monkeypatch.setattr("ledger.db.load_migrations", lambda: fake)
    c = connect(db_path)
    try:
        with pytest.raises(cipher.OperationalError, match="nowhere"):
            migrate(c)
        assert schema_version(c) == 1
        assert table_names(c) == {"a"}
        assert not c.in_transaction
    finally:
        c.close()


# -- the writer ---------------------------------------------------------------


async def test_group_commit_many_jobs_share_commits(plain: sqlite3.Connection) -> None:
    writer = LedgerWriter(plain)
    results: dict[int, int] = {}

    async def one(i: int) -> None:
        results[i] = await writer.call(insert(f"v{i}"))

    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        async with anyio.create_task_group() as jobs:
            for i in range(500):
                jobs.start_soon(one, i)
        tg.cancel_scope.cancel()

    assert sorted(results) == list(range(500))
    assert len(set(results.values())) == 500
    rows = dict(plain.execute("SELECT v, id FROM t").fetchall())
    assert rows == {f"v{i}": rowid for i, rowid in results.items()}
    assert writer.jobs == 500
    assert 1 <= writer.commits < 500


async def test_failing_job_gets_its_error_and_the_rest_commit(
    plain: sqlite3.Connection,
) -> None:
    rollbacks: list[int] = []
    writer = LedgerWriter(plain, on_rollback=lambda: rollbacks.append(1))

    def bad(c: sqlite3.Connection) -> int:
        c.execute("INSERT INTO t (v) VALUES ('written-then-raised')")
        raise KeyError("boom")

    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        # Submitted without a checkpoint in between: one batch.
        pendings: list[Pending[int]] = [
            writer.submit(bad if i == 3 else insert(f"v{i}")) for i in range(8)
        ]
        for i, p in enumerate(pendings):
            if i == 3:
                with pytest.raises(KeyError, match="boom"):
                    await p.result()
            else:
                assert await p.result() > 0
        tg.cancel_scope.cancel()

    assert values(plain) == [f"v{i}" for i in range(8) if i != 3]
    assert writer.commits == 1
    assert rollbacks  # caches were told that something rolled back
    assert not plain.in_transaction


async def test_constraint_error_in_a_job_fails_only_that_job(plain: sqlite3.Connection) -> None:
    writer = LedgerWriter(plain)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        first = writer.submit(insert("same"))
        dup = writer.submit(insert("same"))
        other = writer.submit(insert("other"))
        assert await first.result() > 0
        with pytest.raises(cipher.IntegrityError):
            await dup.result()
        assert await other.result() > 0
        tg.cancel_scope.cancel()
    assert values(plain) == ["same", "other"]


async def test_failing_commit_fails_the_whole_batch(plain: sqlite3.Connection) -> None:
    plain.executescript(
        "CREATE TABLE parent (id INTEGER PRIMARY KEY);"
        "CREATE TABLE child (id INTEGER PRIMARY KEY,"
        " pid INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);"
    )
    rollbacks: list[int] = []
    writer = LedgerWriter(plain, on_rollback=lambda: rollbacks.append(1))

    def orphan(c: sqlite3.Connection) -> str:
        c.execute("INSERT INTO child (pid) VALUES (999)")  # checked only at COMMIT
        return "orphan written"

    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        batch: list[Pending[Any]] = [
            writer.submit(insert("a")),
            writer.submit(orphan),
            writer.submit(insert("b")),
        ]
        for p in batch:
            with pytest.raises(LedgerWriteFailed) as info:
                await p.result()
            assert isinstance(info.value.__cause__, cipher.IntegrityError)
        assert rollbacks
        assert writer.commits == 0
        # The writer goes on working after a failed commit.
        assert await writer.call(insert("after")) > 0
        tg.cancel_scope.cancel()

    assert values(plain) == ["after"]
    assert plain.execute("SELECT count(*) FROM child").fetchone()[0] == 0
    assert writer.commits == 1
    assert not plain.in_transaction


async def test_cancelled_writer_finishes_queued_jobs_then_refuses(
    plain: sqlite3.Connection,
) -> None:
    writer = LedgerWriter(plain, max_batch=7)  # several batches left to drain
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        pendings = [writer.submit(insert(f"v{i}")) for i in range(30)]
        tg.cancel_scope.cancel()

    assert all(p.done for p in pendings)
    assert [p.get() for p in pendings] == sorted(p.get() for p in pendings)
    assert values(plain) == [f"v{i}" for i in range(30)]
    assert writer.queued == 0
    assert writer.commits >= 30 // 7
    with pytest.raises(WriterClosed):
        writer.submit(insert("late"))
    assert values(plain)[-1] == "v29"


async def test_outcomes_resolve_in_submission_order_after_their_commit(
    plain: sqlite3.Connection, db_path: Path
) -> None:
    observer = connect(db_path)
    writer = LedgerWriter(plain, max_batch=4)

    def bad(c: sqlite3.Connection) -> int:
        raise RuntimeError("no")

    def visible(rowid: int) -> str | None:
        row = observer.execute("SELECT v FROM t WHERE id = ?", (rowid,)).fetchone()
        return None if row is None else str(row[0])

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            pendings = [writer.submit(bad if i == 5 else insert(f"v{i}")) for i in range(10)]
            assert not any(p.done for p in pendings)  # nothing before the commit
            await pendings[0].result()
            # The whole first batch is resolved when its first caller resumes, and
            # each outcome is committed: another connection reads it.
            assert all(p.done for p in pendings[:4])
            assert [visible(p.get()) for p in pendings[:4]] == ["v0", "v1", "v2", "v3"]
            for p in pendings[1:]:
                await p.wait()
            tg.cancel_scope.cancel()
        with pytest.raises(RuntimeError):
            pendings[5].get()  # a failed job's outcome is its error, alone
        expected = [f"v{i}" for i in range(10) if i != 5]
        assert [visible(p.get()) for i, p in enumerate(pendings) if i != 5] == expected
    finally:
        observer.close()


async def test_every_outcome_of_a_batch_whose_commit_fails_is_the_failure(
    plain: sqlite3.Connection,
) -> None:
    plain.executescript(
        "CREATE TABLE parent (id INTEGER PRIMARY KEY);"
        "CREATE TABLE child (pid INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);"
    )
    writer = LedgerWriter(plain)

    def orphan(c: sqlite3.Connection) -> int:
        c.execute("INSERT INTO child (pid) VALUES (1)")
        return 1

    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        good = writer.submit(insert("x"))
        bad = writer.submit(orphan)
        with pytest.raises(LedgerWriteFailed):
            await good.result()
        with pytest.raises(LedgerWriteFailed):
            await bad.result()
        tg.cancel_scope.cancel()
    assert values(plain) == []


# -- ingest -------------------------------------------------------------------


def test_first_contact_creates_everything(conn: sqlite3.Connection) -> None:
    cache = IdentityCache()
    acc = put(conn, cache, rec("m1", text="hello", mode="steer"), SessionSpec(None, "helper"))

    entity = conn.execute("SELECT id, kind, name, merged_into FROM entities").fetchall()
    assert len(entity) == 1
    ent_id, kind, name, merged_into = entity[0]
    assert ent_id.startswith("ent_")
    assert (kind, name, merged_into) == ("contact", "Alice", None)
    assert conn.execute(
        "SELECT channel, sender_id, entity_id, display_name FROM contacts"
    ).fetchall() == [("chat", "alice", ent_id, "Alice")]
    assert core(acc) == ("m1", f"dm:{ent_id}", acc.item, False, acc.seq, ent_id)
    assert acc.seq >= 1

    s = session(conn, acc.session)
    assert (s["kind"], s["entity_id"], s["persona"], s["origin"], s["status"]) == (
        "dm",
        ent_id,
        "helper",
        "inbound",
        "active",
    )
    inbound = conn.execute(
        "SELECT id, channel, msg_id, item_id, session_label, entity_id, text, queue_mode"
        " FROM inbound"
    ).fetchall()
    assert len(inbound) == 1
    inbound_id = inbound[0][0]
    assert inbound[0][1:] == ("chat", "m1", acc.item, acc.session, ent_id, "hello", "steer")
    assert conn.execute(
        "SELECT seq, id, session_label, source, mode, inbound_id, status FROM queue_items"
    ).fetchall() == [(acc.seq, acc.item, acc.session, "person", "steer", inbound_id, "queued")]


def test_second_message_reuses_contact_and_session(conn: sqlite3.Connection) -> None:
    cache = IdentityCache()
    first = put(conn, cache, rec("m1"))
    second = put(conn, IdentityCache(), rec("m2"))  # slow path: found in the tables
    third = put(conn, cache, rec("m3"))  # fast path: cached route
    assert first.session == second.session == third.session
    assert first.entity == second.entity == third.entity
    assert len({first.item, second.item, third.item}) == 3
    assert first.seq < second.seq < third.seq
    assert counts(conn) | {"inbound": 0, "queue_items": 0} == {
        "entities": 1,
        "contacts": 1,
        "sessions": 1,
        "session_aliases": 0,
        "session_history": 0,
        "inbound": 0,
        "queue_items": 0,
    }
    assert counts(conn)["queue_items"] == 3


@pytest.mark.parametrize("path", ["slow", "fast"])
def test_repeat_is_a_duplicate_and_writes_nothing(conn: sqlite3.Connection, path: str) -> None:
    cache = IdentityCache()
    first = put(conn, cache, rec("m1", text="original"))
    if path == "slow":
        cache = IdentityCache()
    else:
        assert len(cache.routes) == 1  # the repeat takes the cached route
    before, changes = counts(conn), conn.total_changes

    again = put(conn, cache, rec("m1", text="changed text"))

    assert core(again) == ("m1", first.session, first.item, True, 0, None)
    assert counts(conn) == before
    assert conn.total_changes == changes
    assert conn.execute("SELECT text FROM inbound").fetchall() == [("original",)]


def test_repeat_is_per_channel(conn: sqlite3.Connection) -> None:
    cache = IdentityCache()
    a = put(conn, cache, rec("m1", channel="chat"))
    b = put(conn, cache, rec("m1", channel="mail"))
    assert not b.duplicate
    assert a.entity != b.entity  # a contact is per channel until merged


def test_group_and_thread_sessions(conn: sqlite3.Connection) -> None:
    cache = IdentityCache()
    g = put(conn, cache, rec("g1", "ann", peer_kind="group", peer_id="room"))
    t = put(conn, cache, rec("g2", "bob", peer_kind="group", peer_id="room", thread="th"))
    same = put(conn, cache, rec("g3", "bob", peer_kind="group", peer_id="room"))
    assert g.session == same.session == "group:chat:room"
    assert t.session == "group:chat:room:thread:th"
    assert session(conn, g.session)["kind"] == "group"
    assert session(conn, g.session)["entity_id"] is None
    assert counts(conn)["entities"] == 2  # senders still become entities


def test_custom_key_template(conn: sqlite3.Connection) -> None:
    spec = SessionSpec("{channel}:{peer}:{sender}", "p")
    acc = put(conn, IdentityCache(), rec("m1", "ann", peer_kind="group", peer_id="room"), spec)
    assert acc.session == "chat:room:ann"
    assert session(conn, acc.session)["persona"] == "p"


def test_failed_ingest_transaction_leaves_nothing(conn: sqlite3.Connection) -> None:
    cache = IdentityCache()

    def boom() -> Accepted:
        ingest(conn, cache, rec("m1"), DEFAULT, 1)
        raise RuntimeError("abort")

    with pytest.raises(RuntimeError):
        tx(conn, boom)
    assert set(counts(conn).values()) == {0}


# -- merge ------------------------------------------------------------------


def two_contacts(conn: sqlite3.Connection, cache: IdentityCache) -> tuple[str, str]:
    a = put(conn, cache, rec("a1", "alice"), now=100)
    b = put(conn, cache, rec("b1", "bob", channel="mail"), now=200)
    assert a.entity is not None
    assert b.entity is not None
    assert a.entity < b.entity
    return a.entity, b.entity


def merge(
    conn: sqlite3.Connection, cache: IdentityCache, src: str, into: str, now: int = 5000
) -> MergeResult:
    return tx(conn, lambda: merge_entities(conn, cache, src, into, now))


@pytest.mark.parametrize("order", ["older-into-newer", "newer-into-older"])
def test_merge_canonical_is_into(conn: sqlite3.Connection, order: str) -> None:
    cache = IdentityCache()
    ea, eb = two_contacts(conn, cache)
    src, into = (ea, eb) if order == "older-into-newer" else (eb, ea)

    result = merge(conn, cache, src, into)

    assert result.canonical == into
    parents = dict(conn.execute("SELECT id, merged_into FROM entities").fetchall())
    assert parents == {into: None, src: into}
    # Equal turns: bob's session (latest activity) is primary whichever is canonical.
    assert result.primary == f"dm:{eb}"
    loser = session(conn, f"dm:{ea}")
    assert (loser["status"], loser["merged_into"]) == ("merged", f"dm:{eb}")
    assert session(conn, f"dm:{eb}")["status"] == "active"
    assert result.aliases == [(f"dm:{ea}", f"dm:{eb}")]
    history = conn.execute("SELECT session_label, reason FROM session_history").fetchall()
    assert history == [(f"dm:{ea}", "merge")]


def test_merge_primary_has_most_turns(conn: sqlite3.Connection) -> None:
    cache = IdentityCache()
    ea, eb = two_contacts(conn, cache)
    conn.execute("UPDATE sessions SET turns = 3 WHERE label = ?", (f"dm:{ea}",))
    result = merge(conn, cache, eb, ea)
    assert result.primary == f"dm:{ea}"
    assert session(conn, f"dm:{eb}")["merged_into"] == f"dm:{ea}"
    assert result.aliases == [(f"dm:{eb}", f"dm:{ea}")]


def test_after_merge_both_contacts_reach_the_primary(conn: sqlite3.Connection) -> None:
    cache = IdentityCache()
    ea, eb = two_contacts(conn, cache)
    assert len(cache.routes) == 2  # both routes cached before the merge
    result = merge(conn, cache, ea, eb)
    alice = put(conn, cache, rec("a2", "alice"), now=6000)
    bob = put(conn, cache, rec("b2", "bob", channel="mail"), now=6000)
    assert alice.session == bob.session == result.primary
    assert alice.entity == bob.entity == eb  # the canonical root: `into`


def test_merge_is_idempotent(conn: sqlite3.Connection) -> None:
    cache = IdentityCache()
    ea, eb = two_contacts(conn, cache)
    first = merge(conn, cache, eb, ea)
    snapshot = {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES}
    assert merge(conn, cache, eb, ea, now=9999) == first
    assert merge(conn, cache, ea, eb, now=9999) == first
    assert {
        t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES
    } == snapshot


def test_merge_of_a_third_entity_without_a_session(conn: sqlite3.Connection) -> None:
    cache = IdentityCache()
    ea, eb = two_contacts(conn, cache)
    ec = tx(conn, lambda: contact_entity(conn, cache, "sms", "carol", None, 300))
    merge(conn, cache, eb, ea)
    result = merge(conn, cache, ec, eb)  # through a non-root member
    assert result.canonical == ea
    assert (f"dm:{ec}", result.primary) in result.aliases
    assert {
        r[0] for r in conn.execute("SELECT merged_into FROM entities WHERE id != ?", (ea,))
    } == {ea}


@pytest.mark.parametrize("which", ["from", "into"])
def test_merge_unknown_entity_is_not_found(conn: sqlite3.Connection, which: str) -> None:
    cache = IdentityCache()
    ea, _ = two_contacts(conn, cache)
    before = counts(conn)
    src, into = ("ent_NOPE", ea) if which == "from" else (ea, "ent_NOPE")
    with pytest.raises(NotFound) as info:
        merge(conn, cache, src, into)
    assert info.value.field == which
    assert info.value.code == "not_found"
    assert counts(conn) == before


# -- queries ----------------------------------------------------------------


@pytest.fixture
def reader(conn: sqlite3.Connection, db_path: Path) -> Iterator[sqlite3.Connection]:
    r = connect(db_path, readonly=True)
    yield r
    r.close()


def test_contact_show(conn: sqlite3.Connection, reader: sqlite3.Connection) -> None:
    cache = IdentityCache()
    ea, eb = two_contacts(conn, cache)
    assert queries.contact_show(reader, "chat", "alice") == {
        "entity": ea,
        "canonical": ea,
        "session": f"dm:{ea}",
    }
    result = merge(conn, cache, eb, ea)
    assert queries.contact_show(reader, "mail", "bob") == {
        "entity": eb,
        "canonical": ea,
        "session": result.primary,
    }
    assert queries.contact_show(reader, "chat", "alice")["session"] == result.primary
    with pytest.raises(NotFound) as info:
        queries.contact_show(reader, "chat", "nobody")
    assert info.value.field == "sender_id"


def test_sessions_list(conn: sqlite3.Connection, reader: sqlite3.Connection) -> None:
    cache = IdentityCache()
    ea, eb = two_contacts(conn, cache)
    put(conn, cache, rec("a2", "alice"), now=150)
    put(conn, cache, rec("g1", "ann", peer_kind="group", peer_id="room"), now=50)
    conn.execute("UPDATE sessions SET updated_at = created_at")

    listed = queries.sessions_list(reader, None, 10)
    assert [s["label"] for s in listed] == [f"dm:{eb}", f"dm:{ea}", "group:chat:room"]
    assert listed[1] == {
        "label": f"dm:{ea}",
        "status": "active",
        "turns": 0,
        "parent": None,
        "kind": "dm",
        "queued": 2,
        "thread": 1,
        "person": {"entity": ea, "name": "Alice", "channels": ["chat:alice"]},
    }
    assert [s["queued"] for s in listed] == [1, 2, 1]
    assert len(queries.sessions_list(reader, None, 2)) == 2

    merge(conn, cache, ea, eb)
    merged = queries.sessions_list(reader, "merged", 10)
    assert [(s["label"], s["status"]) for s in merged] == [(f"dm:{ea}", "merged")]
    assert queries.sessions_list(reader, "closed", 10) == []


def test_resolve_for_show(conn: sqlite3.Connection, reader: sqlite3.Connection) -> None:
    cache = IdentityCache()
    ea, eb = two_contacts(conn, cache)
    ec = tx(conn, lambda: contact_entity(conn, cache, "sms", "carol", None, 300))
    merge(conn, cache, ea, eb)
    result = merge(conn, cache, ec, ea)
    # A merged session's own label still names it.
    assert queries.resolve_for_show(reader, f"dm:{ea}") == f"dm:{ea}"
    # A name that is only an alias leads to its session.
    assert queries.resolve_for_show(reader, f"dm:{ec}") == result.primary
    with pytest.raises(NotFound) as info:
        queries.resolve_for_show(reader, "dm:nobody")
    assert info.value.field == "session"


def test_counts_and_queued_items(conn: sqlite3.Connection, reader: sqlite3.Connection) -> None:
    cache = IdentityCache()
    a = put(conn, cache, rec("m1", text="first"))
    put(conn, cache, rec("m2", text="second"))
    assert queries.counts(reader) == {
        "sessions": 1,
        "queued": 2,
        "items_queued": 2,
        "items_running": 0,
        "unconfirmed": 0,
    }
    items = queries.queued_items(reader, a.session, 10)
    assert [(i["msg_id"], i["preview"], i["status"]) for i in items] == [
        ("m1", "first", "queued"),
        ("m2", "second", "queued"),
    ]


# -- the whole store --------------------------------------------------------


async def test_ledger_store_round_trip(db_path: Path) -> None:
    async with Ledger.open(db_path, readers=1) as ledger:
        assert ledger.migrations_applied[:2] == ["0001_spine", "0002_turns"]
        pendings = [
            ledger.submit_inbound(rec(f"m{i}", f"user{i % 3}"), DEFAULT, 1000 + i) for i in range(9)
        ]
        accepted = [await p.result() for p in pendings]
        assert len({a.session for a in accepted}) == 3
        assert not any(a.duplicate for a in accepted)
        again = await ledger.submit_inbound(rec("m0", "user0"), DEFAULT, 2000).result()
        assert again.duplicate
        assert again.item == accepted[0].item
        assert {
            k: v for k, v in (await ledger.counts()).items() if k in ("sessions", "queued")
        } == {
            "sessions": 3,
            "queued": 9,
        }
        shown = await ledger.contact_show("chat", "user1")
        assert shown["session"] == accepted[1].session
        listed = await ledger.sessions_list(None, 10)
        assert sorted(s["label"] for s in listed) == sorted({a.session for a in accepted})
    async with Ledger.open(db_path, readers=1) as reopened:
        assert reopened.migrations_applied == []
        counted = await reopened.counts()
        assert (counted["sessions"], counted["queued"]) == (3, 9)
