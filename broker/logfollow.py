"""`logs.follow`: live log records for an operator connection.

A follower registers a tap on the log pipeline (plumbing.logs.add_tap). Records
pass its filters (session, minimum level) into a bounded buffer; a task of the
connection sends them as `log` frames. A follower that cannot keep up loses
records, never slows the daemon, and is told how many it lost.
"""

from __future__ import annotations

import threading
from collections.abc import MutableMapping
from typing import Any

import anyio
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from broker.connection import Connection
from plumbing import logs

BUFFER = 1000
LEVEL_ORDER = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}


class Follower:
    def __init__(self, conn: Connection, session: str | None, level: str) -> None:
        self.conn = conn
        self.session = session
        self.min_level = LEVEL_ORDER[level]
        self.dropped = 0
        self._thread = threading.get_ident()
        self._send: MemoryObjectSendStream[dict[str, Any]]
        self._receive: MemoryObjectReceiveStream[dict[str, Any]]
        self._send, self._receive = anyio.create_memory_object_stream[dict[str, Any]](BUFFER)

    def tap(self, record: MutableMapping[str, Any]) -> None:
        if threading.get_ident() != self._thread:
            return  # memory streams belong to the event loop's thread
        if LEVEL_ORDER.get(str(record.get("level")), 20) < self.min_level:
            return
        if self.session is not None and record.get("session") != self.session:
            return
        try:
            self._send.send_nowait(dict(record))
        except anyio.WouldBlock:
            self.dropped += 1

    async def run(self) -> None:
        logs.add_tap(self.tap)
        try:
            async with self._receive:
                async for record in self._receive:
                    if self.dropped:
                        self._post(
                            {
                                "level": "warning",
                                "event": "log records dropped",
                                "dropped": self.dropped,
                            }
                        )
                        self.dropped = 0
                    self._post(record)
        finally:
            logs.remove_tap(self.tap)

    def _post(self, record: dict[str, Any]) -> None:
        frame = {**record, "type": "log"}  # a record's own "type" key must not win
        self.conn.post(orjson.dumps(frame, default=str) + b"\n", droppable=True)
