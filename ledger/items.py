"""Queue items as the ledger reads them back: one row shape for every reader.

Rule: `ItemInfo` is the item with its inbound message (if any) joined in, in the
      column order of `ITEM_COLUMNS`; a reader never picks its own columns.
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

import orjson

from broker.core.queue_machine import QueueMode

from .errors import NotFound

ITEM_COLUMNS = (
    "q.id, q.seq, q.session_label, q.source, q.mode, q.status, q.turn_id, q.payload,"
    " i.channel, i.msg_id, i.sender_id, i.sender_name, i.peer_kind, i.peer_id, i.thread_id,"
    " i.text, q.dispatch_id, q.route_mode"
)


class ItemInfo(NamedTuple):  # a named tuple: built once per message, cheaply
    id: str
    seq: int
    session: str
    source: str
    mode: str | None
    status: str
    turn_id: str | None
    payload: str | None
    channel: str | None
    msg_id: str | None
    sender_id: str | None
    sender_name: str | None
    peer_kind: str | None
    peer_id: str | None
    thread_id: str | None
    text: str | None
    dispatch_id: str | None = None
    route_mode: QueueMode | None = None  # an inbound message's, decided at ingest (ingest.py)

    @property
    def content(self) -> str:
        if self.text is not None:
            return self.text
        payload = self.payload or ""
        if payload.startswith("{"):  # a structured item (a worker result) carries its text
            try:
                value = orjson.loads(payload)
            except orjson.JSONDecodeError:
                return payload
            if isinstance(value, dict) and isinstance(value.get("text"), str):
                return str(value["text"])
        return payload


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
