"""The ledger's write side: batches of jobs run as transactions on the one write
connection, the same for the writer process and the writer thread; and that
connection assembled with its identity caches, the full-text index brought up
to date before each COMMIT (fts.py), and the WAL checkpointer beside it
(checkpoint.py).

A job that raises is rolled back alone and its caller gets the exception; the other
jobs of its batch commit (the batch first runs without savepoints; only when a job
fails is it rolled back and run again with one savepoint per job). If the COMMIT
fails, nothing of the batch is kept and every job of it fails: with `StorageFailed`
when the storage refused it (`storage_error`: it may commit later), else with
`LedgerWriteFailed`. After a storage failure no batch runs (`HeldBack`) until the
failed one comes again, led by `resume_writes`.

A COMMIT that got no answer (the server lost with it, on PostgreSQL) may have
committed. A connection that can tell (`commit_verdict`,
ledger/postgres/connection.py) is asked before the failed batch runs again: if it
committed, its jobs get the outcomes of the run that committed and are not run again
(a second run would see its own writes: an inbound message as a duplicate, a turn as
a lost head race); if not, they run again as after any storage failure. Settled jobs
stay settled until they come again, even when the batch that brings them back is in
doubt in its turn. A doubt that can never be settled fails its jobs' callers (they
may have committed: an ingest sent again is then a duplicate), but not those of jobs
settled before, which committed. SQLite's COMMIT is local: it leaves no doubt.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Protocol

from ledger.db import Synchronous, connect
from ledger.fts import indexer_for
from ledger.ingest import WriterCaches, WriterConnection
from ledger.port import cipher as driver
from ledger.port.cipher import Key
from ledger.port.errors import HeldBack, LedgerWriteFailed, StorageFailed, storage_error
from ledger.writer.checkpoint import WalCheckpointer
from ledger.writer.jobs import JobSpec, Outcome, resume_writes


class BatchExecutor(Protocol):
    """Runs a batch of jobs as one transaction (blocking; called in a worker thread)."""

    def execute(self, jobs: list[JobSpec]) -> list[Outcome]: ...

    def close(self) -> None: ...


class _JobFailed(Exception):
    """Internal: a job raised during the optimistic run of a batch."""


class Transactor:
    """Runs batches of jobs on one connection, one transaction per batch.

    Used in a worker thread (`ThreadLink`), or in the writer process (writer_process.py).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        on_rollback: Callable[[], None] | None = None,
        before_commit: Callable[[sqlite3.Connection], object] | None = None,
        checkpointer: WalCheckpointer | None = None,
    ) -> None:
        self._conn = conn
        self._on_rollback = on_rollback
        # Work every transaction ends with (the full-text index: ledger/fts.py).
        # If it fails, the whole batch fails, as when the COMMIT does.
        self._before_commit = before_commit
        # Checkpoints run beside the transactions, not in their COMMIT (checkpoint.py).
        self._checkpointer = checkpointer
        self._writing: AbstractContextManager[Any] = (
            checkpointer.writing if checkpointer else nullcontext()
        )
        self._held: HeldBack | None = None  # set by a storage failure
        # The jobs of a batch whose COMMIT got no answer, with their outcomes.
        self._unanswered: list[tuple[JobSpec, Outcome]] = []
        # Those of them that committed after all, by id(job), until they come again.
        self._settled: dict[int, tuple[JobSpec, Outcome]] = {}
        if checkpointer is not None:
            checkpointer.attach(conn)
            checkpointer.start()

    def execute(self, jobs: list[JobSpec]) -> list[Outcome]:
        if self._held is not None:
            if not (jobs and jobs[0].fn is resume_writes):
                return [(None, self._held)] * len(jobs)  # the failed batch first
            if self._unanswered:
                try:
                    self._settle_unanswered()
                except driver.Error as exc:
                    if storage_error(exc):  # not known yet: the batch comes again
                        return self._failed(jobs, exc)
                    self._unanswered, self._held = [], None  # never to be known
                    failure = self._failed(jobs, exc)[0]
                    return [self._settled.pop(id(job), (job, failure))[1] for job in jobs]
            self._held = None
        if self._settled:
            return self._with_settled(jobs)
        return self._run(jobs)

    def _run(self, jobs: list[JobSpec]) -> list[Outcome]:
        with self._writing:
            try:
                try:
                    outcomes = self._transaction(jobs, savepoints=False)
                except _JobFailed:
                    outcomes = self._transaction(jobs, savepoints=True)
            except driver.Error as exc:
                return self._failed(jobs, exc)
        if self._checkpointer is not None:
            self._checkpointer.committed()
        return outcomes

    def _failed(self, jobs: list[JobSpec], exc: sqlite3.Error) -> list[Outcome]:
        failure: LedgerWriteFailed
        if storage_error(exc):
            failure = StorageFailed(f"ledger write failed: {exc}")
            self._held = HeldBack(f"held back behind a batch that failed: {exc}")
        else:
            failure = LedgerWriteFailed(f"ledger write failed: {exc}")
        failure.__cause__ = exc
        return [(None, failure)] * len(jobs)

    def _settle_unanswered(self) -> None:
        """Did the unanswered COMMIT commit? (Raises while that cannot be known.)"""
        verdict = getattr(self._conn, "commit_verdict", None)
        if verdict is not None and verdict():
            # Added to those settled before, not in their place: a batch that carried
            # settled jobs may be the one in doubt now, and they must not run again.
            self._settled.update((id(job), (job, outcome)) for job, outcome in self._unanswered)
        self._unanswered = []

    def _with_settled(self, jobs: list[JobSpec]) -> list[Outcome]:
        """The outcomes of jobs that committed already; the others run now."""
        settled = {
            i: self._settled.pop(id(job)) for i, job in enumerate(jobs) if id(job) in self._settled
        }
        rest = [
            job for i, job in enumerate(jobs) if i not in settled and job.fn is not resume_writes
        ]
        ran = self._run(rest) if rest else []
        if rest and self._held is not None:
            # They failed on the storage: all come again, the settled ones settled still.
            self._settled.update((id(answer[0]), answer) for answer in settled.values())
            return [ran[0]] * len(jobs)
        more = iter(ran)
        return [
            settled[i][1]
            if i in settled
            else (None, None)
            if job.fn is resume_writes
            else next(more)
            for i, job in enumerate(jobs)
        ]

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
        self._conn.close()

    def _transaction(self, jobs: list[JobSpec], *, savepoints: bool) -> list[Outcome]:
        conn = self._conn
        outcomes: list[Outcome] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for job in jobs:
                if savepoints:
                    conn.execute("SAVEPOINT job")
                try:
                    value = job.run(conn)
                except Exception as exc:  # the job's own failure, for its caller
                    if storage_error(exc):
                        raise  # the storage's, not the job's: the whole batch
                    if not savepoints:
                        raise _JobFailed from exc
                    conn.execute("ROLLBACK TO job")
                    # Now, not after the batch: a later job of it must not find what
                    # this one put in the caches (ingest.py).
                    self._rolled_back()
                    outcomes.append((None, exc))
                else:
                    outcomes.append((value, None))
                if savepoints:
                    conn.execute("RELEASE job")
            if self._before_commit is not None:
                self._before_commit(conn)
            self._commit(jobs, outcomes)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self._rolled_back()  # whatever ended it, the caches go with the writes
            raise
        return outcomes

    def _commit(self, jobs: list[JobSpec], outcomes: list[Outcome]) -> None:
        try:
            self._conn.execute("COMMIT")
        except driver.Error as exc:
            if storage_error(exc) and getattr(self._conn, "in_doubt", None) is not None:
                self._unanswered = list(zip(jobs, outcomes, strict=True))  # in doubt
            raise

    def _rolled_back(self) -> None:
        if self._on_rollback is not None:
            self._on_rollback()


def open_transactor(
    path: Path | str, synchronous: Synchronous, key: Key | None = None
) -> Transactor:
    """Open the writer's connection and what goes with it (blocking)."""
    conn = connect(path, synchronous, factory=WriterConnection, key=key)
    assert isinstance(conn, WriterCaches)
    checkpointer: WalCheckpointer | None = None
    try:
        checkpointer = WalCheckpointer(path, key=key)
        return Transactor(conn, conn.forget, indexer_for(conn), checkpointer)
    except BaseException:
        if checkpointer is not None:
            checkpointer.stop()
        conn.close()
        raise
