"""The SQLite ledger behind the port (`ledger/port/protocols.py`): one writer, a few readers.

Rule 1: every write goes through the one writer (`ledger/writer/group_commit.py`) as a job
        of a `ledger/` module; every read runs one function of a `ledger/`
        module on a reader connection, in one hop to a reader thread.
Rule 2: the broker shell sees this class only through the port's methods;
        nothing outside `ledger/` touches SQLite.
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import anyio.abc

from core.identity import SessionSpec
from core.reach import REFUSED
from ledger import dispatch as dispatches
from ledger import events, sessions, snapshots, threads, turns
from ledger.db import Synchronous, connect, damaged, is_damage, migrate, quick_check
from ledger.foreign import schema_of
from ledger.ingest import ingest_job
from ledger.merge import merge_job
from ledger.port.errors import LedgerNotWritable, NotReachable, WriterDied
from ledger.port.protocols import WriterStats
from ledger.port.records import (
    Accepted,
    Carry,
    Dispatched,
    Handoff,
    InboundRecord,
    ItemInfo,
    Limits,
    MergeResult,
    Reaching,
    Reported,
    TurnRecord,
)
from ledger.sqlite.admission import AdmittedWrites
from ledger.sqlite.audit import AuditMethods
from ledger.sqlite.events import EventWrites
from ledger.sqlite.library import LibraryMethods
from ledger.sqlite.outbox import OutboxClaimMethods
from ledger.sqlite.reads import ReaderPool, SqliteReads
from ledger.sqlite.routes import RouteMethods
from ledger.sqlite.threads import SqliteThreads
from ledger.sqlite.timers import TimerMethods
from ledger.writer.group_commit import BatchLink, LedgerWriter, ThreadLink
from ledger.writer.jobs import Pending
from ledger.writer.process import ProcessLink, configure_logging
from ledger.writer.transactor import open_transactor

T = TypeVar("T")


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
    SqliteReads, SqliteThreads, RouteMethods, EventWrites, LibraryMethods, AdmittedWrites,
    OutboxClaimMethods, TimerMethods, AuditMethods,
):  # fmt: skip
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
        self.location = str(path)  # for logs: the file, or the database (ledger/postgres)
        self.writer = LedgerWriter(link, fail_exit_s=write_fail_exit_s, max_queue=writer_queue)
        super().__init__(readers)
        self._process = process  # the writer process, None when it is a thread
        self.writer_pid = process.pid if process is not None else None
        self.migrations_applied: list[str] = []
        self._snapshot_max_bytes = snapshots.DEFAULT_MAX_BYTES
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
        writer_queue: int = 100_000,
        writer_wait_s: float = 10.0,
    ) -> AsyncIterator[Ledger]:
        """Check, open, migrate and run the ledger; the writer stops when the block exits.

        `writer="process"` runs the write transactions in a child process (see
        writer_process.py); `"thread"` runs them in a thread of this process.
        `log` is the (level, format) the writer process logs with. `check_s`
        bounds the integrity check (db.py Rule 3; 0 skips it). Raises
        LedgerDamaged or LedgerNotWritable before anything is written. Storage that
        stays unwritable for `write_fail_exit_s` ends the writer (writer.py Rule 7).
        `writer_queue`, `writer_wait_s`: the writer's backpressure (writer.py Rule 9).
        """

        def opener() -> tuple[list[str], bool, list[sqlite3.Connection]]:
            path.parent.mkdir(parents=True, exist_ok=True)
            schema_of(path)  # another program's database is refused untouched (NotALedger)
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
        ledger = cls(path, link, ReaderPool(read_conns), process, write_fail_exit_s, writer_queue)
        ledger.writer_wait_s = writer_wait_s
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

    # -- writes (IngestPort, TurnPort, OpsPort) ------------------------------

    def submit_inbound(self, rec: InboundRecord, spec: SessionSpec, now: int) -> Pending[Accepted]:
        return self.writer.submit(ingest_job, rec, spec, now)

    async def ingest(
        self, batch: list[tuple[InboundRecord, SessionSpec]], now: int
    ) -> list[Accepted]:
        pending = [self.writer.submit(ingest_job, rec, spec, now) for rec, spec in batch]
        return [await p.result() for p in pending]

    async def merge_entities(self, src: str, into: str, now: int) -> MergeResult:
        return await self.writer.call(merge_job, src, into, now)

    def submit_mark_running(self, turn_id: str, item_ids: list[str], now: int) -> Pending[None]:
        return self.writer.submit(turns.mark_running, turn_id, item_ids, now)

    def submit_turn(self, rec: TurnRecord) -> Pending[list[ItemInfo]]:
        return self.writer.submit(turns.commit_turn, rec)

    def submit_orphan(self, rec: TurnRecord) -> Pending[list[ItemInfo]]:
        return self.writer.submit(turns.commit_orphan, rec)

    def submit_progress(self, turn_id: str, session: str, output: str, now: int) -> Pending[None]:
        return self.writer.submit(turns.save_progress, turn_id, session, output, now)

    def submit_item_status(
        self, items: list[tuple[str, str, str | None]], now: int
    ) -> Pending[None]:
        return self.writer.submit(turns.set_item_status, items, now)

    def submit_command_done(
        self,
        item_id: str,
        reason: str,
        reply: tuple[str, str, str, str] | None,
        override: str | bool | None,
        now: int,
    ) -> Pending[None]:
        return self.writer.submit(turns.command_done, item_id, reason, reply, override, now)

    def submit_new_thread(
        self,
        label: str,
        now: int,
        thread: int | None = None,
        reason: str = "new",
        carry: Carry | None = None,
    ) -> Pending[int | None]:
        return self.writer.submit(threads.start_thread, label, thread, reason, carry, now)

    def submit_delivered(self, out_ids: list[str], now: int) -> Pending[int]:
        # Lazy (writer.py Rule 6): nobody waits on it, and it commutes with every job.
        return self.writer.submit_lazy(turns.mark_delivered, out_ids, now)

    async def settled(self) -> None:
        await self.writer.settled()

    async def recover_crashed(self, now: int, session: str | None = None) -> list[str]:
        return await self.writer.call(turns.recover_crashed, now, session)

    async def dispatch(
        self,
        *,
        parent: str | None,
        parent_turn: str | None,
        tool_call: str | None,
        target: dict[str, Any],
        task: str,
        persona: str | None,
        limits: Limits,
        now: int,
        handoff: Handoff | None = None,
        reaching: Reaching | None = None,
    ) -> Dispatched:
        done = await self.writer.call(
            dispatches.dispatch,
            parent=parent,
            parent_turn=parent_turn,
            tool_call=tool_call,
            target=target,
            task=task,
            persona=persona,
            limits=limits,
            now=now,
            handoff=handoff,
            reaching=reaching,
        )
        if done is None:  # refused and audited (ledger/dispatch.py Rule 5)
            raise NotReachable(REFUSED, field="target")
        return done

    async def report_worker_done(self, session: str, result: str, now: int) -> Reported:
        return await self.writer.call(dispatches.report, session, result, now)

    async def sweep_worker_timeouts(self, now: int) -> list[ItemInfo]:
        return await self.writer.call(dispatches.sweep_timeouts, now)

    async def fork(self, turn_id: str, label: str | None, now: int) -> str:
        return await self.writer.call(sessions.fork, turn_id, label, now)

    async def scratchpad_merge(self, session: str, patch: dict[str, Any], now: int) -> Any:
        return await self.writer.call(events.scratchpad_merge, session, patch, now)

    async def import_session(
        self, lines: list[bytes], label: str | None, now: int
    ) -> tuple[str, int]:
        return await self.writer.call(sessions.import_lines, lines, label, now)

    def configure_logging(self, level: str, fmt: str) -> Pending[None] | None:
        """Have the writer process log at `level` in `fmt` from its next batch on (after
        a reload); None with a writer thread, which shares the daemon's logging.
        Not waited for: a reload must not hang on a writer that is stuck."""
        if self.writer_pid is None:
            return None
        return self.writer.submit(configure_logging, level, fmt)

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

    # -- file snapshots (SnapshotPort) ------------------------------------------

    @property
    def snapshot_max_bytes(self) -> int:
        return self._snapshot_max_bytes

    @snapshot_max_bytes.setter
    def snapshot_max_bytes(self, max_bytes: int) -> None:
        """Applies to the turns submitted after it, whoever submits them: the
        writer (a process, say) holds the setting. Not waited for, as a reload
        must not hang on a stuck writer."""
        self._snapshot_max_bytes = max_bytes
        self.writer.submit(snapshots.configure, max_bytes)

    async def file_history(self, session: str, path: str) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: snapshots.history(c, session, path))

    async def file_at(self, session: str, path: str, turn: str | None) -> dict[str, Any]:
        return await self.readers.run(lambda c: snapshots.at(c, session, path, turn))

    async def file_list(self, session: str) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: snapshots.files(c, session))

    async def snapshots_gc(self) -> dict[str, int]:
        return await self.writer.call(snapshots.gc)

    # -- the ledger's own state -------------------------------------------------

    backend = "sqlite"

    def wal_bytes(self) -> int:
        """The size of the WAL file (0 when there is none)."""
        try:
            return os.stat(f"{self.path}-wal").st_size
        except FileNotFoundError:
            return 0

    def writer_stats(self) -> WriterStats:
        w = self.writer
        return WriterStats(w.queued, w.commits, w.jobs, self.writer_pid, self.wal_bytes())
