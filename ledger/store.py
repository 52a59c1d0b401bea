"""The ledger as the broker sees it: one writer, a few readers, async methods.

The broker core talks to this class only; nothing outside `ledger/` touches
SQLite. A server database would be another implementation of the same methods.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc

from . import queries
from .db import Synchronous, connect, migrate
from .ingest import Accepted, IdentityCache, InboundRecord, SessionSpec, ingest
from .merge import MergeResult, merge_entities
from .writer import LedgerWriter, Pending

T = TypeVar("T")


class ReaderPool:
    """A fixed set of read connections, each used by one thread at a time."""

    def __init__(self, conns: list[sqlite3.Connection]) -> None:
        self._free = list(conns)
        self._all = list(conns)
        self._slots = anyio.Semaphore(len(conns))

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        async with self._slots:
            conn = self._free.pop()
            try:
                return await anyio.to_thread.run_sync(fn, conn)
            finally:
                self._free.append(conn)

    def close(self) -> None:
        for conn in self._all:
            conn.close()


class Ledger:
    def __init__(self, path: Path, writer_conn: sqlite3.Connection, readers: ReaderPool) -> None:
        self.path = path
        self.cache = IdentityCache()
        self.writer = LedgerWriter(writer_conn, on_rollback=self.cache.clear)
        self.readers = readers
        self._writer_conn = writer_conn
        self.migrations_applied: list[str] = []

    @classmethod
    @asynccontextmanager
    async def open(
        cls, path: Path, synchronous: Synchronous = "NORMAL", *, readers: int = 2
    ) -> AsyncIterator[Ledger]:
        """Open, migrate and run the ledger; the writer stops when the block exits."""

        def opener() -> tuple[sqlite3.Connection, list[str], list[sqlite3.Connection]]:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = connect(path, synchronous)
            applied = migrate(conn)
            return conn, applied, [connect(path, synchronous) for _ in range(readers)]

        conn, applied, read_conns = await anyio.to_thread.run_sync(opener)
        ledger = cls(path, conn, ReaderPool(read_conns))
        ledger.migrations_applied = applied
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(ledger.writer.run)
                try:
                    yield ledger
                finally:
                    tg.cancel_scope.cancel()
        finally:
            ledger.readers.close()
            conn.close()

    # -- writes ------------------------------------------------------------

    def submit_inbound(self, rec: InboundRecord, spec: SessionSpec, now: int) -> Pending[Accepted]:
        cache = self.cache
        return self.writer.submit(lambda conn: ingest(conn, cache, rec, spec, now))

    async def merge_entities(self, src: str, into: str, now: int) -> MergeResult:
        cache = self.cache
        return await self.writer.call(lambda conn: merge_entities(conn, cache, src, into, now))

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self.writer.call(fn)

    # -- reads -------------------------------------------------------------

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self.readers.run(fn)

    async def counts(self) -> dict[str, int]:
        return await self.read(queries.counts)

    async def sessions_list(self, status: str | None, limit: int) -> list[dict[str, Any]]:
        return await self.read(lambda c: queries.sessions_list(c, status, limit))

    async def contact_show(self, channel: str, sender_id: str) -> dict[str, Any]:
        return await self.read(lambda c: queries.contact_show(c, channel, sender_id))
