"""A running turn's partial output, saved while it streams (ledger/turns.py,
broker/mailbox/running_turn.py)."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from broker.mailbox.running_turn import RunningTurn
from core.identity import SessionSpec
from ledger import turns as lt
from ledger.ingest import IdentityCache, ingest
from ledger.port.records import InboundRecord, TurnRecord

STARTED, SAVED, RESTARTED = 5_000, 6_000, 9_000


def in_tx(c: sqlite3.Connection, fn: Any, *args: Any) -> Any:
    """Run a writer job in a transaction of its own."""
    c.execute("BEGIN IMMEDIATE")
    out = fn(c, *args)
    c.execute("COMMIT")
    return out


def running_turn(c: sqlite3.Connection, turn_id: str = "t1") -> tuple[str, str]:
    """One message, its item marked running by turn `turn_id`: (session, item)."""
    msg = InboundRecord("chat", "m1", "alice", None, "dm", "alice", None, "hello", None, None, None)
    accepted = in_tx(c, ingest, IdentityCache(), msg, SessionSpec(None, None), 1_000)
    in_tx(c, lt.mark_running, turn_id, [accepted.item], STARTED)
    return accepted.session, accepted.item


def progress(c: sqlite3.Connection) -> list[tuple[str, str]]:
    return c.execute("SELECT turn_id, output FROM turn_progress").fetchall()


def turn_row(c: sqlite3.Connection, turn_id: str) -> tuple[Any, ...]:
    return tuple(
        c.execute(
            "SELECT status, reason, output, started_at, completed_at FROM turns WHERE id = ?",
            (turn_id,),
        ).fetchone()
    )


def assistant_messages(c: sqlite3.Connection, turn_id: str) -> list[str]:
    rows = c.execute(
        "SELECT content FROM messages WHERE turn_id = ? AND role = 'assistant'", (turn_id,)
    )
    return [r[0] for r in rows]


def test_a_save_replaces_the_one_before(conn: sqlite3.Connection) -> None:
    session, _ = running_turn(conn)
    in_tx(conn, lt.save_progress, "t1", session, "hel", SAVED)
    in_tx(conn, lt.save_progress, "t1", session, "hello wor", SAVED + 1_000)
    assert progress(conn) == [("t1", "hello wor")]


def test_a_turn_cut_off_by_a_crash_keeps_its_last_saved_output(
    conn: sqlite3.Connection,
) -> None:
    session, item = running_turn(conn)
    in_tx(conn, lt.save_progress, "t1", session, "hello wor", SAVED)
    assert in_tx(conn, lt.recover_crashed, RESTARTED) == ["t1"]
    assert turn_row(conn, "t1") == ("aborted", "crash", "hello wor", STARTED, RESTARTED)
    assert assistant_messages(conn, "t1") == ["hello wor"]
    assert progress(conn) == []
    assert [(i.id, i.status) for i in lt.load_open_items(conn)] == [(item, "queued")]


def test_a_turn_cut_off_before_any_save_keeps_no_output(conn: sqlite3.Connection) -> None:
    running_turn(conn)
    assert in_tx(conn, lt.recover_crashed, RESTARTED) == ["t1"]
    assert turn_row(conn, "t1") == ("aborted", "crash", "", STARTED, RESTARTED)
    assert assistant_messages(conn, "t1") == []


def test_a_commit_removes_its_turns_saved_output(conn: sqlite3.Connection) -> None:
    session, _ = running_turn(conn)
    in_tx(conn, lt.save_progress, "t1", session, "hello wor", SAVED)
    [info] = lt.load_open_items(conn)
    rec = TurnRecord(
        turn_id="t1",
        session=session,
        parent_id=None,
        type="turn",
        status="completed",
        reason=None,
        error=None,
        output="hello world",
        engine="echo",
        model=None,
        started_at=STARTED,
        completed_at=RESTARTED,
        prompt_tokens=None,
        completion_tokens=None,
        inputs=[info],
        item_status="done",
        progress_saved=True,
    )
    in_tx(conn, lt.commit_turn, rec)
    assert progress(conn) == []
    assert in_tx(conn, lt.recover_crashed, RESTARTED + 1) == []  # nothing left running


def test_a_turn_cut_off_after_a_compaction_it_waited_for_starts_after_it(
    conn: sqlite3.Connection,
) -> None:
    """Marked running, then a reactive compaction committed, then a crash: the
    recorded turn does not overlap the compaction (ledger/turns.py)."""
    session, _ = running_turn(conn)
    compacted = SAVED
    rec = TurnRecord(
        turn_id="c1",
        session=session,
        parent_id=None,
        type="compaction",
        status="completed",
        reason="reactive",
        error=None,
        output="summary",
        engine="echo",
        model=None,
        started_at=STARTED + 10,
        completed_at=compacted,
        prompt_tokens=None,
        completion_tokens=None,
        inputs=[],
        item_status="done",
    )
    in_tx(conn, lt.commit_turn, rec)
    assert in_tx(conn, lt.recover_crashed, RESTARTED) == ["t1"]
    assert turn_row(conn, "t1") == ("aborted", "crash", "", compacted, RESTARTED)


# -- when a running turn saves ---------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.anyio
async def test_a_turn_saves_at_the_first_delta_of_each_period(anyio_backend: str) -> None:
    clock, saved = Clock(), list[str]()

    async def save(turn: RunningTurn) -> None:
        saved.append("".join(turn.parts))

    turn = RunningTurn(
        "t1", 1, "o1", "s", None, lambda *a: None, clock=clock, save_every_s=1.0, save_progress=save
    )
    # Deltas "a", "b", ... at these times: nothing is saved in the first second,
    # then the output so far at the first delta of each period.
    for n, t in enumerate([0.0, 0.5, 0.9, 1.0, 1.5, 2.2, 2.3, 2.4, 3.2]):
        clock.now = t
        await turn.delta(chr(ord("a") + n))
    assert saved == ["abcd", "abcdef", "abcdefghi"]
