"""Which queued items have reached their session's runtime, for a cluster on Temporal.

A node hands an item to its session's workflow only after the ledger committed it,
so a node that dies between the two leaves an acked item that no workflow knows.
The node that lands a hand-off records it here, lazily (`handed_at`); any node looks
every second for queued items older than a grace period with no such record, and
hands them over itself. Before a node hands over a session's item, it hands over the
session's earlier items that nobody recorded, so a workflow sees a session's items in
the order the ledger queued them even when they came in through different nodes. The
workflow ignores an item it already holds, so a late record costs one redundant
signal, never a second turn.

The local runtime never records hand-offs: its actors read the ledger directly. So
the reads find these items among those in flight (SQLite's `queue_items_open`), and
queuing an item writes no index of its own for them.
"""

from __future__ import annotations

import sqlite3

from ledger.items import ITEM_COLUMNS, item_from_row
from ledger.port.records import ItemInfo

# The condition of SQLite's partial index `queue_items_open`, spelled as it is there so
# that the planner reads these items from it (only those in flight), not from the table.
_IN_FLIGHT = "q.status IN ('queued', 'running')"


def mark_handed(conn: sqlite3.Connection, item_ids: list[str], now: int) -> None:
    """Record that these items' hand-offs landed (only the first landing counts)."""
    conn.executemany(
        "UPDATE queue_items SET handed_at = ? WHERE id = ? AND handed_at IS NULL",
        [(now, i) for i in item_ids],
    )


def unhanded_items(conn: sqlite3.Connection, before_ms: int, limit: int) -> list[ItemInfo]:
    """Queued items created before `before_ms` whose hand-off nobody recorded, in
    arrival order."""
    rows = conn.execute(
        f"SELECT {ITEM_COLUMNS} FROM queue_items q LEFT JOIN inbound i ON i.id = q.inbound_id"
        " WHERE q.status = 'queued' AND q.handed_at IS NULL AND q.created_at < ?"
        # `+q.seq`: not the table read in seq order up to the LIMIT, but the index
        f" AND {_IN_FLIGHT} ORDER BY +q.seq LIMIT ?",
        (before_ms, limit),
    )
    return [item_from_row(r) for r in rows]


def unhanded_before(conn: sqlite3.Connection, session: str, seq: int) -> list[ItemInfo]:
    """A session's queued items ahead of `seq` whose hand-off nobody recorded yet, in
    arrival order: what must reach the workflow before the item at `seq` does."""
    rows = conn.execute(
        f"SELECT {ITEM_COLUMNS} FROM queue_items q LEFT JOIN inbound i ON i.id = q.inbound_id"
        " WHERE q.session_label = ? AND q.status = 'queued' AND q.handed_at IS NULL"
        f" AND q.seq < ? AND {_IN_FLIGHT} ORDER BY q.seq",
        (session, seq),
    )
    return [item_from_row(r) for r in rows]
