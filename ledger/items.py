"""Queue items as the ledger reads them back: one row shape for every reader.

`ItemInfo` is the item with its inbound message (if any) joined in, in the column
order of `ITEM_COLUMNS`; a reader never picks its own columns.
"""

from __future__ import annotations

import sqlite3

from ledger.port.errors import NotFound
from ledger.port.records import ItemInfo

ITEM_COLUMNS = (
    "q.id, q.seq, q.session_label, q.source, q.mode, q.status, q.turn_id, q.payload,"
    " i.channel, i.msg_id, i.sender_id, i.sender_name, i.peer_kind, i.peer_id, i.thread_id,"
    " i.text, q.dispatch_id, q.route_mode"
)


def item_from_row(row: tuple[object, ...]) -> ItemInfo:
    return ItemInfo(*row)  # type: ignore[arg-type]


def load_item(conn: sqlite3.Connection, item_id: str) -> ItemInfo:
    row = conn.execute(
        f"SELECT {ITEM_COLUMNS} FROM queue_items q LEFT JOIN inbound i ON i.id = q.inbound_id"
        " WHERE q.id = ?",
        (item_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"no queue item {item_id!r}")
    return item_from_row(row)
