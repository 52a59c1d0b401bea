"""ledger/state_records.py on SQLite: the record stored at each commit equals the one
worked out from the turn's stored rows, and a ledger whose turns
predate the table gets rows again from the next commit on."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import orjson
import pytest

from core.engine_types import ToolCall
from core.session_state import loads
from ledger import state_records
from ledger.port.records import TurnRecord
from ledger.sqlite.store import Ledger
from plumbing.ids import new_id
from tests import ledger_db
from tests.conformance.records import inbound, ingest, turn

pytestmark = pytest.mark.anyio


def call(name: str, args: dict[str, object], status: str = "ok") -> ToolCall:
    return ToolCall(new_id(), name, orjson.dumps(args).decode(), f"{name} said so", status)  # type: ignore[arg-type]


async def a_thread(ledger: Ledger) -> tuple[str, list[TurnRecord]]:
    """Five turns of every kind the record reads: calls, events, a failure, an abort."""
    acc = await ingest(ledger, inbound("m0", text="start with the parser"))
    label, parent, done = acc.session, None, []
    shapes: list[dict[str, object]] = [
        {"tool_calls": [call("read_file", {"path": "p.py"}), call("pytest", {"k": "p"}, "error")]},
        {"events": [("decision", {"text": "hand-written parser"}), ("intent", {"text": "fix"})]},
        {
            "status": "failed",
            "error": "engine gave up\nstack",
            "events": [("error", {"text": "x"})],
        },
        {"status": "aborted", "tool_calls": [call("pytest", {"k": "p"})]},
        {"events": [("file", {"path": "q.py", "op": "create"}), ("feedback", {"resolves": "x"})]},
    ]
    for n, shape in enumerate(shapes):
        if n:
            await ingest(ledger, inbound(f"m{n}", text=f"step {n}"))
        items = [i for i in await ledger.open_items(label) if i.status == "queued"]
        rec = dataclasses.replace(turn(label, parent, items), model=f"m{n % 2}", **shape)  # type: ignore[arg-type]
        await ledger.submit_turn(rec).result()
        parent = rec.turn_id
        done.append(rec)
    return label, done


async def test_the_stored_record_is_the_one_worked_out_from_the_rows(tmp_path: Path) -> None:
    async with Ledger.open(tmp_path / "l.db", writer="thread", check_s=0) as ledger:
        _label, done = await a_thread(ledger)
        stored = [await ledger.state_record(r.turn_id) for r in done]
    conn = ledger_db.connect(tmp_path / "l.db")
    try:
        conn.execute("DELETE FROM turn_state")
        worked_out = [state_records.state_at(conn, r.turn_id) for r in done]
    finally:
        conn.close()
    assert worked_out == stored
    last = stored[-1]
    assert last.focus == "step 4" and last.counts.turns == 5
    assert [(e.text, e.resolved) for e in last.errors] == [
        ("pytest failed: pytest said so", True),  # the same call succeeded in turn 4
        ("engine gave up", False),
        ("x", True),
    ]
    assert [f.path for f in last.files] == ["p.py", "q.py"]


async def test_a_ledger_without_rows_gets_them_again_from_its_next_turn(tmp_path: Path) -> None:
    async with Ledger.open(tmp_path / "l.db", writer="thread", check_s=0) as ledger:
        label, done = await a_thread(ledger)
        before = await ledger.state_record(done[-1].turn_id)
    conn = ledger_db.connect(tmp_path / "l.db")
    conn.execute("DELETE FROM turn_state")  # as a ledger from before migration 0009
    conn.commit()
    conn.close()
    async with Ledger.open(tmp_path / "l.db", writer="thread", check_s=0) as ledger:
        assert await ledger.state_record(done[-1].turn_id) == before
        assert (await ledger.session_state(label))["decisions"][0]["text"] == (
            "hand-written parser"
        )
        await ingest(ledger, inbound("m9", text="one more"))
        items = [i for i in await ledger.open_items(label) if i.status == "queued"]
        rec = turn(label, done[-1].turn_id, items)
        await ledger.submit_turn(rec).result()
        after = await ledger.state_record(rec.turn_id)
    conn = ledger_db.connect(tmp_path / "l.db")
    try:
        (raw,) = conn.execute(
            "SELECT state FROM turn_state WHERE turn_id = ?", (rec.turn_id,)
        ).fetchone()
    finally:
        conn.close()
    assert loads(raw) == after
    assert after.counts.turns == before.counts.turns + 1 and after.focus == "one more"
    assert after.decisions == before.decisions


async def test_a_rollover_seed_starts_the_next_thread_and_only_that_one(tmp_path: Path) -> None:
    """What an automatic rollover carries over is the new thread's starting
    record; its first turn takes it, and a later new thread starts empty again."""
    async with Ledger.open(tmp_path / "l.db", writer="thread", check_s=0) as ledger:
        label, done = await a_thread(ledger)
        carried = await ledger.state_record(done[-1].turn_id)

        def roll_over(conn: sqlite3.Connection) -> None:  # as a rollover's transaction would
            conn.execute("UPDATE sessions SET head_turn_id = NULL WHERE label = ?", (label,))
            state_records.seed_thread(conn, label, carried, 1)

        await ledger.writer.call(roll_over)
        empty_thread = await ledger.session_state(label)
        assert empty_thread["session"]["head"] is None
        assert empty_thread["decisions"][0]["text"] == "hand-written parser"
        assert (await ledger.session_start(label)).seed == carried

        await ingest(ledger, inbound("n1", text="a new day"))
        items = [i for i in await ledger.open_items(label) if i.status == "queued"]
        first = turn(label, None, items)
        await ledger.submit_turn(first).result()
        state = await ledger.state_record(first.turn_id)
        assert state.focus == "a new day" and state.decisions == carried.decisions
        assert state.counts.turns == carried.counts.turns + 1

        await ledger.submit_new_thread(label, 2).result()  # an explicit /new
        assert (await ledger.session_state(label))["decisions"] == []
        await ingest(ledger, inbound("n2", text="clean"))
        items = [i for i in await ledger.open_items(label) if i.status == "queued"]
        clean = turn(label, None, items)
        await ledger.submit_turn(clean).result()
        assert (await ledger.state_record(clean.turn_id)).decisions == ()
