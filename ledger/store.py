"""The ledger as the broker sees it: one writer, a few readers, async methods.

The broker core talks to this class only; nothing outside `ledger/` touches
SQLite. A server database would be another implementation of the same methods.
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import anyio.abc

from broker.core.identity import SessionSpec

from . import queries
from .db import (
    LedgerNotWritable,
    Synchronous,
    connect,
    damaged,
    is_damage,
    migrate,
    quick_check,
)
from .ingest import Accepted, InboundRecord, ingest_job
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


def _check(conn: sqlite3.Connection, path: Path, budget_s: float) -> bool:
    """Refuse a ledger that is damaged or cannot be written; False if the check ran out
    of time (what it covered was sound)."""
    # SQLite opens a file it may not write read-only without a word: ask the kernel,
    # which also knows an immutable attribute (even root may not write those).
    if not os.access(path, os.W_OK):
        raise LedgerNotWritable(
            f"the ledger {path} is not writable by uid {os.getuid()}: "
            "check its owner, mode and attributes (ls -l, lsattr)"
        )
    if budget_s <= 0:
        return True
    check = quick_check(conn, budget_s)
    if check.problems:
        raise damaged(path, check.problems)
    return check.finished


class Ledger:
    def __init__(
        self,
        path: Path,
        link: BatchLink,
        readers: ReaderPool,
        process: ProcessLink | None = None,
        write_fail_exit_s: float = math.inf,
    ) -> None:
        self.path = path
        self.writer = LedgerWriter(link, fail_exit_s=write_fail_exit_s)
        self.readers = readers
        self._process = process  # the writer process, None when it is a thread
        self.writer_pid = process.pid if process is not None else None
        self.migrations_applied: list[str] = []
        self.check_finished = True  # False: the integrity check ran out of time (db.py Rule 3)

    def writer_problems(self) -> list[str]:
        """Why the writer cannot commit now, checked afresh on each call (for `health`)."""
        problems = []
        if self.writer.dead is not None:
            problems.append(str(self.writer.dead))
        problem = self._process.problem() if self._process is not None else None
        if problem is not None and problem not in problems:
            problems.append(problem)
        if self.write_failure is not None:  # the storage refuses writes (writer.py Rule 7)
            problems.append(self.write_failure)
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
        write_fail_exit_s: float = math.inf,
        check_s: float = 10.0,
    ) -> AsyncIterator[Ledger]:
        """Check, open, migrate and run the ledger; the writer stops when the block exits.

        `writer="process"` runs the write transactions in a child process (see
        writer_process.py); `"thread"` runs them in a thread of this process.
        `log` is the (level, format) the writer process logs with. `check_s`
        bounds the integrity check (db.py Rule 3; 0 skips it). Raises
        LedgerDamaged or LedgerNotWritable before anything is written. Storage that
        stays unwritable for `write_fail_exit_s` ends the writer (writer.py Rule 7).
        """

        def opener() -> tuple[list[str], bool, list[sqlite3.Connection]]:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                conn = connect(path, synchronous)
                try:
                    finished = _check(conn, path, check_s)
                    applied = migrate(conn)
                finally:
                    conn.close()
                return applied, finished, [connect(path, synchronous) for _ in range(readers)]
            except sqlite3.DatabaseError as exc:
                if is_damage(exc):
                    raise damaged(path, [str(exc)]) from exc
                raise

        applied, checked, read_conns = await anyio.to_thread.run_sync(opener)
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
        ledger = cls(path, link, ReaderPool(read_conns), process, write_fail_exit_s)
        ledger.migrations_applied = applied
        ledger.check_finished = checked
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

    @property
    def write_failure(self) -> str | None:
        """Why the ledger cannot write right now, or None while it can."""
        failure = self.writer.failure
        return failure.reason() if failure is not None else None

    # -- reads -------------------------------------------------------------

    def wal_bytes(self) -> int:
        """The size of the WAL file (0 when there is none)."""
        try:
            return os.stat(f"{self.path}-wal").st_size
        except FileNotFoundError:
            return 0

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self.readers.run(fn)

    async def health_reads(
        self, untouched_since: int
    ) -> tuple[dict[str, int], list[tuple[str, int, int]], str | None]:
        """For `health`: the counts, the sessions with open items untouched since
        `untouched_since` (label, items, oldest), or why the ledger cannot be read."""
        try:
            counts = await self.counts()
            rows = await self.read(lambda c: queries.open_items_untouched_since(c, untouched_since))
        except sqlite3.Error as exc:
            return {}, [], f"the ledger cannot be read: {exc}"
        return counts, rows, None

    async def counts(self) -> dict[str, int]:
        return await self.read(queries.counts)

    async def sessions_list(self, status: str | None, limit: int) -> list[dict[str, Any]]:
        return await self.read(lambda c: queries.sessions_list(c, status, limit))

    async def contact_show(self, channel: str, sender_id: str) -> dict[str, Any]:
        return await self.read(lambda c: queries.contact_show(c, channel, sender_id))
