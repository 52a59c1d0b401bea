"""The SQLite ledger behind the port (`ledger/port/protocols.py`): `Ledger` opens the
file, runs its one writer and its readers, and closes them.

Every write goes through the one writer (`ledger/writer/group_commit.py`) as a job of
a `ledger/` module, and every read runs on a reader connection in one hop to a
reader thread (`ledger/sqlite/connections.py`). The port's parts are implemented one
module each beside this one (`ingest`, `turns`, `delivery`, `reads`, `ops`,
`timers`, `snapshots`, `routes`, `threads`, `titles`, `library`, `erasure`,
`retention`, `handoffs`, `leases`); `Ledger` is
their sum, plus what is the ledger's as a whole: opening (a damaged or unwritable
file is refused before anything is written), admission to the writer's queue, the
writer's state, and closing. The broker shell sees it only through the port;
nothing outside `ledger/` touches SQLite.
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc

from ledger.db import Synchronous, connect, damaged, is_damage, migrate, quick_check
from ledger.foreign import schema_of
from ledger.forgotten import shadow
from ledger.port import cipher as driver
from ledger.port.cipher import Key
from ledger.port.errors import LedgerNotWritable, WriterDied
from ledger.port.protocols import WriterStats
from ledger.sqlite.audit import SqliteAudit
from ledger.sqlite.connections import ReaderPool
from ledger.sqlite.delivery import SqliteDelivery
from ledger.sqlite.embeddings import SqliteEmbeddings
from ledger.sqlite.erasure import SqliteErasure
from ledger.sqlite.handoffs import SqliteHandoffs
from ledger.sqlite.ingest import SqliteIngest
from ledger.sqlite.leases import SqliteLeases
from ledger.sqlite.library import SqliteLibrary
from ledger.sqlite.names import SqliteNames
from ledger.sqlite.ops import SqliteOps
from ledger.sqlite.proposals import SqliteProposals
from ledger.sqlite.reads import SqliteReads
from ledger.sqlite.resume import SqliteResume
from ledger.sqlite.retention import SqliteRetention
from ledger.sqlite.routes import SqliteRoutes
from ledger.sqlite.snapshots import SqliteSnapshots
from ledger.sqlite.threads import SqliteThreads
from ledger.sqlite.timers import SqliteTimers
from ledger.sqlite.titles import SqliteTitles
from ledger.sqlite.turns import SqliteTurns
from ledger.writer.group_commit import BatchLink, LedgerWriter, ThreadLink
from ledger.writer.jobs import Pending
from ledger.writer.process import ProcessLink, configure_logging
from ledger.writer.transactor import open_transactor

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


class Ledger(
    SqliteIngest,
    SqliteTurns,
    SqliteDelivery,
    SqliteReads,
    SqliteOps,
    SqliteTimers,
    SqliteSnapshots,
    SqliteRoutes,
    SqliteThreads,
    SqliteTitles,
    SqliteEmbeddings,
    SqliteLibrary,
    SqliteErasure,
    SqliteNames,
    SqliteResume,
    SqliteRetention,
    SqliteHandoffs,
    SqliteLeases,
    SqliteAudit,
    SqliteProposals,
):
    """The port on one SQLite file: the sum of its parts, opened by `Ledger.open`."""

    backend = "sqlite"
    writer_wait_s = 10.0  # the bound on a wait for room (ledger.writer_wait_s)

    def __init__(
        self,
        path: Path,
        link: BatchLink,
        readers: ReaderPool,
        process: ProcessLink | None = None,
        write_fail_exit_s: float = math.inf,
        writer_queue: int = 100_000,
    ) -> None:
        self.path = path
        self.key: Key | None = None  # set by `open` for an encrypted ledger
        self.location = str(path)  # for logs: the file, or the database (ledger/postgres)
        self.writer = LedgerWriter(link, fail_exit_s=write_fail_exit_s, max_queue=writer_queue)
        self.lease_writer = self.writer
        self.readers = readers
        self._process = process  # the writer process, None when it is a thread
        self.writer_pid = process.pid if process is not None else None
        self.migrations_applied: list[str] = []
        self.check_finished = True  # False: the integrity check ran out of time (ledger/db.py)

    def writer_problems(self) -> list[str]:
        """Why the writer cannot commit now, checked afresh on each call (for `health`)."""
        problems = []
        if self.writer.dead is not None:
            problems.append(str(self.writer.dead))
        problem = self._process.problem() if self._process is not None else None
        if problem is not None and problem not in problems:
            problems.append(problem)
        if self.write_failure is not None:  # the storage refuses writes, retried meanwhile
            problems.append(self.write_failure)
        return problems

    async def _watch_writer_process(self, process: ProcessLink) -> None:
        """Stop the ledger the moment the writer process ends (ledger/writer/process.py):
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
        writer_queue: int = 100_000,
        writer_wait_s: float = 10.0,
        key: Key | None = None,
    ) -> AsyncIterator[Ledger]:
        """Check, open, migrate and run the ledger; the writer stops when the block exits.

        `writer="process"` runs the write transactions in a child process (see
        ledger/writer/process.py); `"thread"` runs them in a thread of this process.
        `log` is the (level, format) the writer process logs with. `check_s`
        bounds the integrity check (`PRAGMA quick_check`, ledger/db.py; 0 skips it).
        Raises LedgerDamaged or LedgerNotWritable before anything is written. Storage
        that stays unwritable for `write_fail_exit_s` ends the writer with
        `WriterStuck`. `writer_queue`, `writer_wait_s`: the writer's backpressure
        (ledger/writer/admission.py). `key` opens an encrypted ledger (a new one is
        created encrypted); every connection, the writer's included, uses it.
        """

        def opener() -> tuple[list[str], bool, list[sqlite3.Connection]]:
            path.parent.mkdir(parents=True, exist_ok=True)
            schema_of(path, key)  # another program's database is refused untouched (NotALedger)
            try:
                conn = connect(path, synchronous, key=key)
                try:
                    finished = _check(conn, path, check_s)
                    applied = migrate(conn)
                finally:
                    conn.close()
                return (
                    applied,
                    finished,
                    [shadow(connect(path, synchronous, key=key)) for _ in range(readers)],
                )
            except driver.DatabaseError as exc:
                if is_damage(exc):
                    problem = str(exc)
                    if key is None and not driver.is_plain(path):
                        problem += "; if it is an encrypted ledger, set [ledger] key_file"
                    raise damaged(path, [problem]) from exc
                raise

        applied, checked, read_conns = await anyio.to_thread.run_sync(opener)
        link: BatchLink
        process: ProcessLink | None = None
        try:
            if writer == "process":
                # Spawned here, on the event loop's thread (see ProcessLink.spawn).
                process = ProcessLink.spawn(path, synchronous, log, key)
                link = process
                await process.start()
            else:
                transactor = await anyio.to_thread.run_sync(open_transactor, path, synchronous, key)
                link = ThreadLink(transactor)
        except BaseException:
            for read_conn in read_conns:
                read_conn.close()
            raise
        ledger = cls(path, link, ReaderPool(read_conns), process, write_fail_exit_s, writer_queue)
        ledger.writer_wait_s = writer_wait_s
        ledger.key = key
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

    # -- the writer: admission, settling, its state -----------------------------

    def has_room(self) -> bool:
        return self.writer.has_room()

    def admit(self) -> Coroutine[Any, Any, None]:
        # The writer's own wait, handed back to be awaited: no coroutine around it.
        return self.writer.admit(self.writer_wait_s)

    async def settled(self) -> None:
        await self.writer.settled()

    def configure_logging(
        self,
        level: str,
        fmt: str,
        secrets: tuple[str, ...] = (),
        patterns: tuple[str, ...] = (),
    ) -> Pending[None] | None:
        """Have the writer process log at `level` in `fmt`, redacting the configured
        `secrets` and `patterns` too, from its next batch on (at start and after a
        reload); None with a writer thread, which shares the daemon's logging. Not
        waited for: a reload must not hang on a writer that is stuck."""
        if self.writer_pid is None:
            return None
        return self.writer.submit(configure_logging, level, fmt, secrets, patterns)

    @property
    def writer_died(self) -> str | None:
        dead = self.writer.dead
        return str(dead) if dead is not None else None

    def stop_retrying(self) -> None:
        self.writer.stop_retrying()

    @property
    def write_failure(self) -> str | None:
        """Why the ledger cannot write right now, or None while it can."""
        failure = self.writer.failure
        return failure.reason() if failure is not None else None

    def wal_bytes(self) -> int:
        """The size of the WAL file (0 when there is none)."""
        try:
            return os.stat(f"{self.path}-wal").st_size
        except FileNotFoundError:
            return 0

    def writer_stats(self) -> WriterStats:
        w = self.writer
        return WriterStats(w.queued, w.commits, w.jobs, self.writer_pid, self.wal_bytes())
