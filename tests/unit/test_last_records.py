"""ledger/state_records.py: the writer takes a turn's parent record from what it
stored last, never from a write that rolled back."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import cast

import pytest

from core.identity import SessionSpec
from core.session_state import EMPTY, loads
from ledger import state_records
from ledger.db import connect, migrate
from ledger.ingest import WriterConnection, ingest_job
from ledger.port.records import TurnRecord
from ledger.sqlite.store import Ledger
from ledger.state_records import LastRecords
from ledger.turns import commit_turn, load_open_items
from ledger.writer.jobs import JobSpec
from ledger.writer.transactor import Transactor
from tests import ledger_db
from tests.conformance.records import inbound, ingest, turn

pytestmark = pytest.mark.anyio


async def test_the_next_turn_reads_no_row_of_its_parent(tmp_path: Path) -> None:
    seen: list[str] = []
    async with Ledger.open(tmp_path / "l.db", writer="thread", check_s=0) as ledger:
        parent, done = None, []
        for n in range(3):
            acc = await ingest(ledger, inbound(f"m{n}", text=f"step {n}"))
            items = [i for i in await ledger.open_items(acc.session) if i.status == "queued"]
            rec = turn(acc.session, parent, items)
            if n == 2:
                await ledger.writer.call(lambda conn: conn.set_trace_callback(seen.append))
            await ledger.submit_turn(rec).result()
            parent = rec.turn_id
            done.append(rec)
        stored = [await ledger.state_record(r.turn_id) for r in done]
    assert seen and not [s for s in seen if s.startswith("SELECT state FROM turn_state")]
    conn = ledger_db.connect(tmp_path / "l.db")
    try:
        conn.execute("DELETE FROM turn_state")
        assert [state_records.state_at(conn, r.turn_id) for r in done] == stored
    finally:
        conn.close()
    assert stored[-1].focus == "step 2" and stored[-1].counts.turns == 3


def commit_then_fail(conn: sqlite3.Connection, rec: TurnRecord) -> None:
    commit_turn(conn, rec)
    raise RuntimeError("failed after its record was stored")


def last_record(conn: sqlite3.Connection, session: str, turn_id: str) -> object:
    assert hasattr(conn, "last_records")  # a WriterConnection on either driver
    return cast(WriterConnection, conn).last_records.get(session, turn_id)


def test_a_job_rolled_back_leaves_no_record_for_the_jobs_after_it(tmp_path: Path) -> None:
    conn = cast(WriterConnection, connect(tmp_path / "l.db", factory=WriterConnection))
    assert hasattr(conn, "last_records")
    migrate(conn)
    transactor = Transactor(conn, conn.forget)
    try:
        [(acc, error)] = transactor.execute(
            [JobSpec(ingest_job, (inbound("m0"), SessionSpec(None, None), 1), {})]
        )
        assert error is None
        rec = turn(acc.session, None, load_open_items(conn, acc.session))
        ask = JobSpec(last_record, (acc.session, rec.turn_id), {})

        failed, after = transactor.execute([JobSpec(commit_then_fail, (rec,), {}), ask])
        assert isinstance(failed[1], RuntimeError)
        assert after == (None, None)  # not the record of the turn rolled back

        committed, after = transactor.execute([JobSpec(commit_turn, (rec,), {}), ask])
        assert committed == ([], None)
        (raw,) = conn.execute(
            "SELECT state FROM turn_state WHERE turn_id = ?", (rec.turn_id,)
        ).fetchone()
        assert after == (loads(raw), None) and loads(raw).counts.turns == 1
    finally:
        transactor.close()


def test_the_records_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_records, "LAST_RECORDS_LIMIT", 2)
    last = LastRecords()
    last.put("a", "t1", EMPTY)
    last.put("b", "t2", EMPTY)
    last.put("a", "t3", EMPTY)  # a session it holds replaces its entry
    assert last.get("a", "t3") is EMPTY and last.get("a", "t1") is None
    last.put("c", "t4", EMPTY)  # a third session: the others go
    assert last.get("b", "t2") is None and last.get("c", "t4") is EMPTY


def test_a_batch_rolled_back_whole_leaves_no_record(tmp_path: Path) -> None:
    """A batch that fails at its end (here the work before its COMMIT) keeps nothing,
    in the ledger or in the writer's memory."""
    conn = cast(WriterConnection, connect(tmp_path / "l.db", factory=WriterConnection))
    assert hasattr(conn, "last_records")
    migrate(conn)
    refusing = False

    def before_commit(conn: sqlite3.Connection) -> None:
        if refusing:
            raise sqlite3.OperationalError("refused before the commit")

    transactor = Transactor(conn, conn.forget, before_commit)
    try:
        [(acc, _)] = transactor.execute(
            [JobSpec(ingest_job, (inbound("m0"), SessionSpec(None, None), 1), {})]
        )
        rec = turn(acc.session, None, load_open_items(conn, acc.session))
        refusing = True
        [(_, error)] = transactor.execute([JobSpec(commit_turn, (rec,), {})])
        assert error is not None
        assert conn.last_records.get(acc.session, rec.turn_id) is None
        assert conn.execute("SELECT count(*) FROM turn_state").fetchone() == (0,)
    finally:
        transactor.close()
