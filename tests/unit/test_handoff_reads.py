"""The hand-off reads of a cluster on Temporal (ledger/handoffs.py) on SQLite: which
queued items nobody recorded as handed over, and that they are found among the items
in flight (`queue_items_open`), never by a scan of every item ever queued, with no
index of their own for queuing an item to write."""

from __future__ import annotations

import sqlite3

from ledger import handoffs


def _item(
    conn: sqlite3.Connection,
    n: int,
    session: str,
    status: str = "queued",
    handed_at: int | None = None,
) -> str:
    item_id = f"item{n}"
    conn.execute(
        "INSERT INTO queue_items (id, session_label, source, payload, status, created_at,"
        " updated_at, handed_at) VALUES (?, ?, 'timer', '{}', ?, ?, ?, ?)",
        (item_id, session, status, n, n, handed_at),
    )
    return item_id


def _fill(conn: sqlite3.Connection) -> None:
    _item(conn, 1, "a")
    _item(conn, 2, "b", handed_at=2)  # its hand-off landed
    _item(conn, 3, "a", status="running")
    _item(conn, 4, "a", status="done")
    _item(conn, 5, "b")
    _item(conn, 6, "a", status="cancelled")
    _item(conn, 7, "a")
    _item(conn, 8, "a")


def test_the_unhanded_items_are_the_queued_ones_nobody_recorded_in_queue_order(
    conn: sqlite3.Connection,
) -> None:
    _fill(conn)
    assert [i.id for i in handoffs.unhanded_items(conn, before_ms=100, limit=10)] == [
        "item1",
        "item5",
        "item7",
        "item8",
    ]
    assert [i.id for i in handoffs.unhanded_items(conn, before_ms=100, limit=2)] == [
        "item1",
        "item5",
    ]
    assert [i.id for i in handoffs.unhanded_items(conn, before_ms=7, limit=10)] == [
        "item1",
        "item5",
    ]
    seq_of_8 = conn.execute("SELECT seq FROM queue_items WHERE id = 'item8'").fetchone()[0]
    assert [i.id for i in handoffs.unhanded_before(conn, "a", seq_of_8)] == ["item1", "item7"]
    handoffs.mark_handed(conn, ["item1", "item7"], 50)
    assert [i.id for i in handoffs.unhanded_before(conn, "a", seq_of_8)] == []
    assert [i.id for i in handoffs.unhanded_items(conn, before_ms=100, limit=10)] == [
        "item5",
        "item8",
    ]


def test_the_reads_go_through_the_index_of_the_items_in_flight(conn: sqlite3.Connection) -> None:
    _fill(conn)
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    handoffs.unhanded_items(conn, before_ms=100, limit=10)
    handoffs.unhanded_before(conn, "a", 8)
    conn.set_trace_callback(None)
    assert len(seen) == 2
    for statement in seen:
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + statement)]
        reads = [step for step in plan if step.startswith(("SCAN q", "SEARCH q"))]
        assert reads, (statement, plan)
        assert all("USING INDEX queue_items_open" in step for step in reads), (statement, plan)


def test_queuing_an_item_writes_no_index_of_the_hand_offs(conn: sqlite3.Connection) -> None:
    indexes = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'queue_items'"
        )
    ]
    assert "queue_items_open" in indexes
    assert not [name for name in indexes if "handed" in name or "unhanded" in name], indexes
