"""The ledger as the broker sees it: one writer, a few readers, async methods.

The broker core talks to this class only; nothing outside `ledger/` touches
SQLite. A server database would be another implementation of the same methods.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import anyio.abc

from . import queries
from .db import Synchronous, connect, migrate
from .ingest import Accepted, InboundRecord, SessionSpec, ingest_job
from .merge import MergeResult, merge_job
from .transactor import open_transactor
from .writer import BatchLink, LedgerWriter, Pending, ThreadLink, WriterDied
from .writer_process import ProcessLink, configure_logging

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


WriterKind = Literal["process", "thread"]


class Ledger:
    def __init__(
        self,
        path: Path,
        link: BatchLink,
        readers: ReaderPool,
        process: ProcessLink | None = None,
    ) -> None:
        self.path = path
        self.writer = LedgerWriter(link)
        self.readers = readers
        self._process = process  # the writer process, None when it is a thread
        self.writer_pid = process.pid if process is not None else None
        self.migrations_applied: list[str] = []

    def writer_problems(self) -> list[str]:
        """Why the writer cannot commit now, checked afresh on each call (for `health`)."""
        problems = []
        if self.writer.dead is not None:
            problems.append(str(self.writer.dead))
        problem = self._process.problem() if self._process is not None else None
        if problem is not None and problem not in problems:
            problems.append(problem)
        return problems

    async def _watch_writer_process(self, process: ProcessLink) -> None:
        """Stop the ledger the moment the writer process ends (writer_process.py Rule 4):
        an idle daemon would otherwise learn of it only at its next write."""
        ending = await process.exited()
        raise WriterDied(f"the ledger writer process {ending}")

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        path: Path,
        synchronous: Synchronous = "NORMAL",
        *,
        readers: int = 2,
        writer: WriterKind = "process",
        log: tuple[str, str] = ("info", "json"),
    ) -> AsyncIterator[Ledger]:
        """Open, migrate and run the ledger; the writer stops when the block exits.

        `writer="process"` runs the write transactions in a child process (see
        writer_process.py); `"thread"` runs them in a thread of this process.
        `log` is the (level, format) the writer process logs with.
        """

        def opener() -> tuple[list[str], list[sqlite3.Connection]]:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = connect(path, synchronous)
            try:
                applied = migrate(conn)
            finally:
                conn.close()
            return applied, [connect(path, synchronous) for _ in range(readers)]

        applied, read_conns = await anyio.to_thread.run_sync(opener)
        link: BatchLink
        process: ProcessLink | None = None
        try:
            if writer == "process":
                # Spawned here, on the event loop's thread (see ProcessLink.spawn).
                process = ProcessLink.spawn(path, synchronous, log)
                link = process
                await process.start()
            else:
                transactor = await anyio.to_thread.run_sync(open_transactor, path, synchronous)
                link = ThreadLink(transactor)
        except BaseException:
            for read_conn in read_conns:
                read_conn.close()
            raise
        ledger = cls(path, link, ReaderPool(read_conns), process)
        ledger.migrations_applied = applied
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(ledger.writer.run)
                if process is not None:
                    # Cancelled below before `aclose` asks the process to exit.
                    tg.start_soon(ledger._watch_writer_process, process)
                try:
                    yield ledger
                finally:
                    tg.cancel_scope.cancel()
        finally:
            ledger.readers.close()
            await ledger.writer.aclose()

    # -- writes ------------------------------------------------------------

    def submit_inbound(self, rec: InboundRecord, spec: SessionSpec, now: int) -> Pending[Accepted]:
        return self.writer.submit(ingest_job, rec, spec, now)

    async def merge_entities(self, src: str, into: str, now: int) -> MergeResult:
        return await self.writer.call(merge_job, src, into, now)

    def configure_logging(self, level: str, fmt: str) -> Pending[None] | None:
        """Have the writer process log at `level` in `fmt` from its next batch on (after
        a reload); None with a writer thread, which shares the daemon's logging.
        Not waited for: a reload must not hang on a writer that is stuck."""
        if self.writer_pid is None:
            return None
        return self.writer.submit(configure_logging, level, fmt)

    async def write(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run `fn(conn, *args, **kwargs)` in a write transaction (writer.py Rule 5)."""
        return await self.writer.call(fn, *args, **kwargs)

    # -- reads -------------------------------------------------------------

    def wal_bytes(self) -> int:
        """The size of the WAL file (0 when there is none)."""
        try:
            return os.stat(f"{self.path}-wal").st_size
        except FileNotFoundError:
            return 0

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self.readers.run(fn)

    async def counts(self) -> dict[str, int]:
        return await self.read(queries.counts)

    async def sessions_list(self, status: str | None, limit: int) -> list[dict[str, Any]]:
        return await self.read(lambda c: queries.sessions_list(c, status, limit))

    async def contact_show(self, channel: str, sender_id: str) -> dict[str, Any]:
        return await self.read(lambda c: queries.contact_show(c, channel, sender_id))
