"""A turn never takes back an item another turn consumed: two attempts of one turn's
activity can overlap under the Temporal runtime (a live node's heartbeat came late and
Temporal ran the turn again elsewhere), and the late attempt must neither mark the
finished item running again nor commit it a second time."""

from __future__ import annotations

import sqlite3

import pytest

from core.identity import SessionSpec
from ledger import turns as lt
from ledger.ingest import IdentityCache, ingest
from ledger.port.errors import HeadMoved
from ledger.port.records import InboundRecord, ItemInfo, TurnRecord
from tests.unit.test_turn_progress import in_tx


def queued(c: sqlite3.Connection) -> tuple[str, ItemInfo]:
    msg = InboundRecord("chat", "m1", "alice", None, "dm", "alice", None, "hello", None, None, None)
    accepted = in_tx(c, ingest, IdentityCache(), msg, SessionSpec(None, None), 1_000)
    [item] = lt.load_open_items(c)
    return accepted.session, item


def completed(session: str, turn: str, parent: str | None, item: ItemInfo, at: int) -> TurnRecord:
    return TurnRecord(
        turn_id=turn,
        session=session,
        parent_id=parent,
        type="turn",
        status="completed",
        reason=None,
        error=None,
        output=f"answer of {turn}",
        engine="echo",
        model=None,
        started_at=at,
        completed_at=at + 10,
        prompt_tokens=None,
        completion_tokens=None,
        inputs=[item],
        item_status="done",
    )


def item_row(c: sqlite3.Connection, item: str) -> tuple[str, str]:
    return tuple(
        c.execute("SELECT status, turn_id FROM queue_items WHERE id = ?", (item,)).fetchone()
    )


def consumed_by(c: sqlite3.Connection) -> list[str]:
    rows = c.execute(
        "SELECT t.id FROM messages m JOIN turns t ON t.id = m.turn_id"
        " WHERE m.msg_id = 'm1' AND m.role = 'user' AND t.status = 'completed'"
    )
    return [r[0] for r in rows]


def test_a_late_attempt_cannot_mark_a_finished_item_running(conn: sqlite3.Connection) -> None:
    session, item = queued(conn)
    in_tx(conn, lt.mark_running, "t1", [item.id], 2_000)
    in_tx(conn, lt.commit_turn, completed(session, "t1", None, item, 2_000))
    in_tx(conn, lt.mark_running, "t2", [item.id], 3_000)  # the late attempt begins
    assert item_row(conn, item.id) == ("done", "t1")
    assert in_tx(conn, lt.recover_crashed, 4_000) == []  # nothing of t2's to run again


def test_a_late_attempt_cannot_commit_what_another_turn_consumed(
    conn: sqlite3.Connection,
) -> None:
    session, item = queued(conn)
    in_tx(conn, lt.mark_running, "t1", [item.id], 2_000)
    in_tx(conn, lt.mark_running, "t2", [item.id], 2_100)  # t1's, so not t2's
    in_tx(conn, lt.commit_turn, completed(session, "t1", None, item, 2_000))
    conn.execute("BEGIN IMMEDIATE")
    with pytest.raises(HeadMoved, match="consumed by another turn"):
        lt.commit_turn(conn, completed(session, "t2", "t1", item, 2_100))
    conn.execute("ROLLBACK")
    assert consumed_by(conn) == ["t1"]
    assert item_row(conn, item.id) == ("done", "t1")
    head = conn.execute("SELECT head_turn_id FROM sessions WHERE label = ?", (session,))
    assert head.fetchone()[0] == "t1"


def test_a_turn_that_lost_the_race_leaves_the_item_with_its_consumer(
    conn: sqlite3.Connection,
) -> None:
    """The shell records the loser off the thread (commit_orphan): the item still names
    the turn that consumed it."""
    session, item = queued(conn)
    in_tx(conn, lt.mark_running, "t1", [item.id], 2_000)
    in_tx(conn, lt.commit_turn, completed(session, "t1", None, item, 2_000))
    in_tx(conn, lt.commit_orphan, completed(session, "t2", "t1", item, 2_100))
    assert item_row(conn, item.id) == ("done", "t1")
    assert consumed_by(conn) == ["t1"]


def test_a_late_attempt_that_lost_leaves_the_item_to_the_attempt_running_it(
    conn: sqlite3.Connection,
) -> None:
    """Two attempts: t1 was cut off and recorded aborted, its retry t2 runs the item; t1
    commits after all, loses (its item is t2's), and is recorded failed: the item stays
    t2's, so t2 can still commit it."""
    session, item = queued(conn)
    in_tx(conn, lt.mark_running, "t1", [item.id], 2_000)
    assert in_tx(conn, lt.recover_crashed, 2_500) == ["t1"]  # t1 aborted, the item waits
    in_tx(conn, lt.mark_running, "t2", [item.id], 3_000)
    conn.execute("BEGIN IMMEDIATE")
    with pytest.raises(HeadMoved):
        lt.commit_turn(conn, completed(session, "t1b", "t1", item, 2_000))
    conn.execute("ROLLBACK")
    in_tx(conn, lt.commit_orphan, completed(session, "t1b", "t1", item, 2_000))
    assert item_row(conn, item.id) == ("running", "t2")
    in_tx(conn, lt.commit_turn, completed(session, "t2", "t1", item, 3_000))
    assert item_row(conn, item.id) == ("done", "t2")
    assert consumed_by(conn) == ["t2"]


@pytest.mark.parametrize("stamped", [None, "turn_reused"])
def test_recovery_requeues_running_items_whose_turn_it_cannot_reuse(
    conn: sqlite3.Connection, stamped: str | None
) -> None:
    # Items running with no turn id (none is written so today), or under an id a
    # committed turn already holds: the recovered turn gets an id of its own, and
    # its items must follow it, not stay running under the fence.
    session, item = queued(conn)
    if stamped is not None:
        in_tx(conn, lt.commit_turn, completed(session, stamped, None, item, 2_000))
        conn.execute("UPDATE queue_items SET status = 'queued' WHERE id = ?", (item.id,))
    conn.execute(
        "UPDATE queue_items SET status = 'running', turn_id = ? WHERE id = ?", (stamped, item.id)
    )
    [recovered] = in_tx(conn, lt.recover_crashed, 5_000)
    assert recovered != stamped
    assert conn.execute("SELECT status, turn_id FROM queue_items").fetchall() == [("queued", None)]
    assert conn.execute("SELECT status FROM turns WHERE id = ?", (recovered,)).fetchone() == (
        "aborted",
    )
