"""A COMMIT whose answer is lost on PostgreSQL: the batch committed, or it did not,
and the writer cannot see which (ledger/writer/transactor.py, connection.py).

The writer's connection is cut at its COMMIT, as a server dying under it would
cut it: after the server committed (only the answer is lost) or before the
COMMIT reached it. Either way every acked message is in the ledger once, its
caller gets the first answer (not a duplicate), and a turn is written once, on
its thread.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import anyio
import psycopg
import pytest

from ledger.port.errors import LedgerWriteFailed
from ledger.postgres.connection import PgConnection, _as_sqlite_error
from ledger.postgres.store import PgLedger, WriterPgConnection
from plumbing.ids import new_id
from tests.conformance.records import DM, inbound, ingest, tick, turn

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]
Cut = Literal["after_commit", "before_commit", "silently"]


class CutOffWriter(WriterPgConnection):
    """The writer's connection, lost at its next COMMIT the way `cut` says; and
    unable to reconnect `refusals` times after that, as while the server is down."""

    cut: Cut | None = None
    then: tuple[Cut, ...] = ()  # the cuts of the COMMITs after that one
    refusals = 0

    def __init__(self, dsn: str) -> None:
        self.was_cut = threading.Event()  # set at the first cut COMMIT
        self.given_up: list[psycopg.Connection[Any]] = []  # cut "silently", still open
        super().__init__(dsn)

    def _send(self, cur: psycopg.Cursor[Any], sql: str, params: Sequence[Any]) -> None:
        if sql == "COMMIT" and self.cut is not None:
            cut, self.cut = self.cut, (self.then[0] if self.then else None)
            self.then = self.then[1:]
            if cut == "after_commit":
                super()._send(cur, sql, params)  # the server commits; its answer never comes
            assert self._conn is not None
            if cut == "silently":
                # A network cut that sent no reset: the server's session sits idle in
                # its transaction, row locks held, and the client has given it up.
                self.given_up.append(self._conn)
                self._conn = None
            else:
                self._conn.close()
            self.was_cut.set()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        super()._send(cur, sql, params)

    def _reconnect(self) -> psycopg.Connection[Any]:
        if self.refusals:
            self.refusals -= 1
            raise _as_sqlite_error(psycopg.OperationalError("connection refused"))
        return super()._reconnect()


@pytest.fixture
def dsn(pg_template: tuple[Any, str]) -> str:
    from ledger.postgres import devcluster

    cluster, template = pg_template
    return devcluster.fresh_database(cluster, "commit_outcome", template)


@pytest.fixture
async def cut_off(dsn: str) -> AsyncIterator[tuple[PgLedger, CutOffWriter]]:
    opened: list[CutOffWriter] = []

    def writer_connection(dsn: str) -> CutOffWriter:
        opened.append(CutOffWriter(dsn))
        return opened[-1]

    async with PgLedger.open_pg(dsn, writer_connection=writer_connection) as ledger:
        try:
            yield ledger, opened[0]
        finally:
            for lost in opened[0].given_up:
                lost.close()


def count(dsn: str, sql: str, *params: Any) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("cut", ["after_commit", "before_commit", "silently"])
async def test_an_ingest_whose_commit_got_no_answer_is_acked_once_as_new(
    cut_off: tuple[PgLedger, CutOffWriter], dsn: str, cut: Cut
) -> None:
    ledger, writer = cut_off
    first = await ingest(ledger, inbound("m1"))
    writer.cut = cut
    with anyio.fail_after(10):  # "silently": the server's session held it for 30 s before
        second = await ingest(ledger, inbound("m2"))
    # The first answer, not a duplicate: a duplicate would not reach the session's actor.
    assert second.duplicate is False and second.seq > first.seq
    assert writer.in_doubt is None
    again = await ingest(ledger, inbound("m2"))
    assert again.duplicate is True and again.item == second.item
    assert [i.msg_id for i in await ledger.open_items(second.session)] == ["m1", "m2"]
    assert count(dsn, "SELECT count(*) FROM inbound WHERE msg_id = 'm2'") == 1
    assert count(dsn, "SELECT count(*) FROM queue_items") == 2


@pytest.mark.parametrize("cut", ["after_commit", "before_commit"])
async def test_a_turn_whose_commit_got_no_answer_is_written_once_on_its_thread(
    cut_off: tuple[PgLedger, CutOffWriter], dsn: str, cut: Cut
) -> None:
    ledger, writer = cut_off
    acc = await ingest(ledger, inbound("m1"))
    items = await ledger.open_items(acc.session)
    turn_id = new_id()
    await ledger.submit_mark_running(turn_id, [i.id for i in items], tick()).result()
    rec = turn(acc.session, None, await ledger.open_items(acc.session), "hi", outbox_channel="chat")
    rec.turn_id = turn_id
    writer.cut = cut
    # Not HeadMoved: a second run would find the head moved by the first, committed one.
    assert await ledger.submit_turn(rec).result() == []
    assert await ledger.open_items(acc.session) == []
    shown = await ledger.session_show(acc.session, 10)
    assert shown["head"] == turn_id
    assert [(t["id"], t["status"]) for t in shown["turns"]] == [(turn_id, "completed")]
    assert count(dsn, "SELECT turns FROM sessions WHERE label = %s", acc.session) == 1
    assert count(dsn, "SELECT count(*) FROM turns") == 1
    assert count(dsn, "SELECT count(*) FROM outbox WHERE turn_id = %s", turn_id) == 1


async def test_a_server_that_cannot_answer_yet_keeps_the_batch_in_doubt_until_it_can(
    cut_off: tuple[PgLedger, CutOffWriter], dsn: str
) -> None:
    ledger, writer = cut_off
    writer.cut = "after_commit"
    writer.refusals = 2  # the verdict waits for the server, through two back-offs
    acc = await ingest(ledger, inbound("m1"))
    assert acc.duplicate is False and writer.refusals == 0
    later = await ingest(ledger, inbound("m2"))  # and the writer goes on after it
    assert later.duplicate is False
    assert count(dsn, "SELECT count(*) FROM inbound") == 2


async def test_a_batch_settled_as_committed_stays_settled_when_its_rerun_is_in_doubt_too(
    cut_off: tuple[PgLedger, CutOffWriter], dsn: str
) -> None:
    """m1's COMMIT commits unanswered; m2 queues behind it and runs in the batch that
    brings m1's outcome, whose COMMIT also commits unanswered. m1 must not run a
    second time once m2's doubt is settled (it used to: its caller got a duplicate,
    which never reaches the session's actor)."""
    ledger, writer = cut_off
    writer.cut, writer.then = "after_commit", ("after_commit",)
    writer.refusals = 1  # the first verdict waits a back-off: m2 comes meanwhile
    first = ledger.submit_inbound(inbound("m1"), DM, tick())
    assert await anyio.to_thread.run_sync(writer.was_cut.wait, 5)
    second = await ledger.submit_inbound(inbound("m2"), DM, tick()).result()
    assert writer.cut is None  # both COMMITs were cut
    acc = await first.result()
    assert acc.duplicate is False and second.duplicate is False
    assert [i.msg_id for i in await ledger.open_items(acc.session)] == ["m1", "m2"]
    assert count(dsn, "SELECT count(*) FROM inbound") == 2


async def test_a_commit_whose_outcome_can_never_be_known_fails_its_callers_and_writes_go_on(
    cut_off: tuple[PgLedger, CutOffWriter], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger, writer = cut_off

    def forgotten() -> bool:
        writer.in_doubt = None
        raise sqlite3.OperationalError("the outcome of transaction 1 is unknown")

    monkeypatch.setattr(writer, "commit_verdict", forgotten)
    writer.cut = "before_commit"
    with pytest.raises(LedgerWriteFailed):
        await ingest(ledger, inbound("m1"))  # the adapter sends it again: a duplicate, or new
    monkeypatch.undo()
    assert (await ingest(ledger, inbound("m2"))).duplicate is False
    assert (await ingest(ledger, inbound("m1"))).duplicate is False
    assert count(dsn, "SELECT count(*) FROM inbound") == 2


def test_a_transaction_the_restarted_server_never_logged_did_not_commit(dsn: str) -> None:
    """A server that crashed before the in-doubt transaction reached its WAL comes back
    with a lower next id and calls that one "in the future": it never committed, and
    its batch runs again (it used to fail its callers: the daemon's fault test lost a
    turn and its items to it)."""
    writer = WriterPgConnection(dsn)
    try:
        row = writer.execute("SELECT pg_current_xact_id()::text").fetchone()
        assert row is not None
        writer.in_doubt = str(int(row[0]) + 1_000_000)
        assert writer.commit_verdict() is False
        assert writer.in_doubt is None and writer.commit_verdict() is None
    finally:
        writer.close()


def test_the_writer_commits_synchronously_on_a_server_that_would_not(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as admin:
        name = admin.info.dbname
        admin.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    reader = PgConnection(dsn)
    writer = WriterPgConnection(dsn)
    try:
        assert reader.execute("SHOW synchronous_commit").fetchone() == ("off",)
        assert writer.execute("SHOW synchronous_commit").fetchone() == ("on",)
    finally:
        reader.close()
        writer.close()


def test_a_commit_refused_on_a_live_connection_leaves_no_doubt(dsn: str) -> None:
    writer = WriterPgConnection(dsn)
    try:
        writer.execute("CREATE TABLE d (n BIGINT UNIQUE DEFERRABLE INITIALLY DEFERRED)")
        writer.execute("BEGIN")
        writer.execute("INSERT INTO d VALUES (1), (1)")
        with pytest.raises(sqlite3.IntegrityError):
            writer.execute("COMMIT")  # the server answered: it did not commit
        assert writer.in_doubt is None and writer.commit_verdict() is None
    finally:
        writer.close()


@pytest.mark.slow
def test_an_async_commit_is_lost_by_a_server_crash_and_the_writers_is_not() -> None:
    """What the author's lost turn was: with `synchronous_commit = off` a COMMIT
    returns before its WAL leaves the server's memory, and `pg_ctl stop -m
    immediate` loses it, while later commits (retried by the writer after the
    restart) are kept. The writer's session commits synchronously."""
    from ledger.postgres import devcluster

    # The WAL writer would flush the async commit within its delay: make that long.
    cluster = devcluster.create(
        durable=False, settings={"synchronous_commit": "off", "wal_writer_delay": "10s"}
    )
    try:
        dsn = devcluster.fresh_database(cluster, "async")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = on")
            conn.execute("CREATE TABLE t (who TEXT)")
        plain = psycopg.connect(dsn, autocommit=True)
        writer = WriterPgConnection(dsn)
        try:
            writer.execute("BEGIN")
            writer.execute("INSERT INTO t VALUES ('writer')")
            writer.execute("COMMIT")
            plain.execute("INSERT INTO t VALUES ('async')")  # committed, by its answer
            cluster.stop("immediate")
        finally:
            plain.close()
            writer.close()
        cluster.start()
        with psycopg.connect(dsn) as conn:
            kept = [r[0] for r in conn.execute("SELECT who FROM t").fetchall()]
        assert kept == ["writer"]
    finally:
        cluster.destroy()


def test_a_transaction_still_running_in_a_lost_session_is_ended_and_did_not_commit(
    dsn: str,
) -> None:
    """The COMMIT never left, the server never heard of the loss; the
    verdict ends that session (and no other) instead of waiting for it for hours."""
    writer = WriterPgConnection(dsn)
    bystander = psycopg.connect(dsn, autocommit=True)
    try:
        writer.execute("CREATE TABLE o (n BIGINT PRIMARY KEY)")
        bystander.execute("BEGIN")
        bystander.execute("INSERT INTO o VALUES (2)")  # another session's open transaction
        writer.execute("BEGIN")
        writer.execute("INSERT INTO o VALUES (1)")
        xid = writer.execute("SELECT pg_current_xact_id()::text").fetchone()[0]
        lost, writer._conn = writer._conn, None  # given up by the client, open on the server
        writer.in_doubt = xid
        assert writer.commit_verdict() is False
        assert writer.in_doubt is None
        writer.execute("BEGIN")
        writer.execute("INSERT INTO o VALUES (1)")  # its row lock went with it
        writer.execute("COMMIT")
        bystander.execute("COMMIT")  # untouched
        assert writer.execute("SELECT n FROM o ORDER BY n").fetchall() == [(1,), (2,)]
        assert lost is not None
        lost.close()
    finally:
        bystander.close()
        writer.close()


def test_the_writers_session_is_ended_by_the_server_when_left_inside_a_transaction(
    dsn: str,
) -> None:
    """A node that vanished mid-batch does not hold its row locks for the
    server's TCP keepalive time. A reader's session keeps the server's default."""
    from ledger.postgres.connection import WRITER_IDLE_IN_TRANSACTION

    reader, writer = PgConnection(dsn), WriterPgConnection(dsn)
    try:
        shown = writer.execute("SHOW idle_in_transaction_session_timeout").fetchone()
        assert shown == (WRITER_IDLE_IN_TRANSACTION,)
        assert reader.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("0",)
    finally:
        reader.close()
        writer.close()


def test_connections_bound_a_silent_server_unless_the_dsn_says_otherwise(dsn: str) -> None:
    """Keepalives and a TCP user timeout by default; the DSN's own win."""
    from ledger.postgres.connection import TCP_BOUNDS, connect_pg

    with connect_pg(dsn) as conn:
        given = conn.info.get_parameters()
    assert {k: given.get(k) for k in TCP_BOUNDS} == TCP_BOUNDS
    from psycopg.conninfo import make_conninfo

    with connect_pg(make_conninfo(dsn, keepalives_idle=42, tcp_user_timeout=0)) as conn:
        given = conn.info.get_parameters()
    assert given["keepalives_idle"] == "42" and given.get("tcp_user_timeout", "0") == "0"
