"""The ledger's one writer, with group commit.

Rule 1: one connection writes, and only the writer touches it. Each batch of
        jobs is one transaction, run whole in one hop to where the connection
        lives (a child process, or a worker thread), so no statement waits on
        the event loop and many callers share one commit.
Rule 2: a job that raises is rolled back alone and its caller gets the
        exception; the other jobs of its batch commit. (The batch first runs
        without savepoints; only when a job fails is it rolled back and run
        again with one savepoint per job. Jobs are therefore pure functions of
        the database: they may run twice, and only the committed run counts.)
Rule 3: a caller learns its job's result only after the COMMIT that holds it
        returned. If the COMMIT fails, nothing of the batch is kept. A failure
        of the storage (disk full, I/O error: `storage_error`) is not the
        jobs' fault: the batch is run again after a back-off, ahead of every
        later job, until it commits, and its callers wait meanwhile (Rule 7).
        Any other failure fails every job of the batch with `LedgerWriteFailed`.
Rule 4: a batch, once handed over, finishes even if the writer is cancelled;
        on cancellation the writer also finishes every job already queued,
        then refuses new ones. A cancelled caller's write may still
        have happened; jobs are idempotent by id, so a retry is harmless.
Rule 5: a job is a function and its arguments, `fn(conn, *args, **kwargs)`, not
        a closure: the transaction may run in another process (see
        writer_process.py), so both go there by pickle. A job that cannot be
        pickled fails alone, with an error saying so.
Rule 6: a lazy job (`submit_lazy`) waits up to `lazy_s` for a batch to join,
        so a write nobody waits on (a delivery confirmation) does not cost a
        transaction of its own when the writer is otherwise quiet. It goes at
        the head of the batch it joins, so it may commit before jobs submitted
        ahead of it: only jobs that commute with every other job may be lazy.
Rule 7: while the storage fails, `failure` says since when and why, and the
        writes keep their order: the executor runs no batch after a failed
        one (`HeldBack`) until the writer sends the failed one again, led by
        `resume_writes`. The first batch that commits clears `failure`; one
        line is logged when writes start failing and one when they recover.
        Storage that stays unwritable for `fail_exit_s` ends the writer with
        `WriterStuck`, which stops the daemon (crash-only: a restart recovers).
        When the writer is cancelled (a shutdown) it stops retrying: what
        fails then fails its callers, for crash recovery at the next start.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import anyio
import anyio.abc

from . import logs
from .checkpoint import WalCheckpointer

log = logs.get("ledger.writer")
T = TypeVar("T")
RETRY_FIRST_S = 0.1  # the back-off before a batch the storage failed runs again,
RETRY_MAX_S = 2.0  # doubled at each failure up to this
Outcome = tuple[Any, BaseException | None]


class JobSpec(NamedTuple):
    """What a transaction runs: `fn(conn, *args, **kwargs)`."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def run(self, conn: sqlite3.Connection) -> Any:
        return self.fn(conn, *self.args, **self.kwargs)


class BatchExecutor(Protocol):
    """Runs a batch of jobs as one transaction (blocking; called in a worker thread)."""

    def execute(self, jobs: list[JobSpec]) -> list[Outcome]: ...

    def close(self) -> None: ...


class BatchLink(Protocol):
    """Carries batches to where the transactions run, and their outcomes back.

    `send` hands over one batch; `receive` returns the outcomes of the oldest
    batch not yet answered. Up to `depth` batches may be handed over before
    the first is answered, so the next batch waits at the connection, not in
    the event loop. Both raise WriterDied when the other side is gone.

    Cancellation (so the writer need not shield every call): `send` hands
    over the whole batch or nothing; a link that has to wait halfway through
    shields that wait itself. `receive` consumes nothing until it returns: a
    cancelled call leaves the outcomes for the next one.
    """

    depth: int

    async def send(self, jobs: list[JobSpec]) -> None: ...

    async def receive(self) -> list[Outcome]: ...

    async def aclose(self) -> None: ...


class ThreadLink:
    """A `BatchLink` to a `BatchExecutor` run in a worker thread, a batch at a time."""

    depth = 1

    def __init__(self, executor: BatchExecutor) -> None:
        self._executor = executor
        self._handed: deque[list[JobSpec]] = deque()
        self._limiter = anyio.CapacityLimiter(1)

    async def send(self, jobs: list[JobSpec]) -> None:
        self._handed.append(jobs)

    async def receive(self) -> list[Outcome]:
        # run_sync is not cancelled while the thread runs (abandon_on_cancel=False).
        outcomes = await anyio.to_thread.run_sync(
            self._executor.execute, self._handed[0], limiter=self._limiter
        )
        self._handed.popleft()
        return outcomes

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._executor.close)


class LedgerWriteFailed(Exception):
    """The transaction holding the job did not commit; nothing of it was kept."""


class StorageFailed(LedgerWriteFailed):
    """The storage refused the transaction (disk full, I/O error); the same jobs may
    commit later. Within the writer only: callers see it only at a shutdown (Rule 7)."""


class HeldBack(StorageFailed):
    """Not run: an earlier batch failed on the storage and goes first (Rule 7)."""


# The storage, not the data: these may pass by themselves, so a batch is run again.
STORAGE_ERRORS = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
    }
)


def storage_error(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.Error) and code is not None and code & 0xFF in STORAGE_ERRORS


def resume_writes(conn: sqlite3.Connection) -> None:
    """A job that leads a batch sent again after a storage failure (Rule 7)."""


class WriteFailure(NamedTuple):
    """Writes fail on the storage since `since_ms` (wall clock); the latest error."""

    since_ms: int
    since: float  # the event loop's clock
    error: str

    def reason(self) -> str:
        failing_s = max(0.0, time.time() - self.since_ms / 1000)
        return f"the ledger cannot write (for {failing_s:.1f} s): {self.error}"


class WriterOverloaded(Exception):
    """The writer's queue is full; the caller should shed load."""


class WriterClosed(Exception):
    """The writer has stopped and takes no more jobs."""


class WriterDied(LedgerWriteFailed):
    """The process running the transactions is gone; no more writes can happen."""


class WriterStuck(WriterDied):
    """The storage failed for longer than the writer may wait (Rule 7)."""


class _JobFailed(Exception):
    """Internal: a job raised during the optimistic run of a batch."""


class Pending(Generic[T]):
    """A submitted job. `await pending.result()` returns after its commit."""

    __slots__ = (
        "_after",
        "_batch_done",
        "_done",
        "_error",
        "_next_batch",
        "_on_error",
        "_value",
        "job",
    )

    def __init__(self, job: JobSpec, next_batch: Callable[[], anyio.Event]) -> None:
        self.job = job
        # Set when the batch that takes the job is resolved; until a batch takes it,
        # `next_batch()` is the event of the batch that will be formed next.
        self._batch_done: anyio.Event | None = None
        self._next_batch = next_batch
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._after: Callable[[T], None] | None = None
        self._on_error: Callable[[BaseException], None] | None = None

    def after_commit(
        self, callback: Callable[[T], None], on_error: Callable[[BaseException], None] | None = None
    ) -> None:
        """Run `callback(result)` in the writer task right after a successful commit.

        Callbacks of one batch run in submission order before any caller
        resumes, so work handed on from here keeps the commit order. They must
        not block or raise.
        """
        self._after = callback
        self._on_error = on_error
        if self._done:
            self._notify()

    def _resolve(self, value: Any, error: BaseException | None) -> None:
        self._value = value
        self._error = error
        self._done = True
        self._notify()

    def _notify(self) -> None:
        if self._error is None:
            if self._after is not None:
                self._after(self._value)  # type: ignore[arg-type]
        elif self._on_error is not None:
            self._on_error(self._error)

    @property
    def done(self) -> bool:
        return self._done

    def get(self) -> T:
        """The result of a finished job (raises its error)."""
        assert self._done
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    async def wait(self) -> None:
        """Return once the job is resolved, committed or failed (without raising)."""
        # Waiting on the job's own batch, not on whichever batch ends first: with
        # a batch in flight and the next one queued behind it, that cost every
        # caller of the later batch a second wake-up.
        while not self._done:
            await (self._batch_done or self._next_batch()).wait()

    async def result(self) -> T:
        await self.wait()
        return self.get()


class Transactor:
    """Runs batches of jobs on one connection, one transaction per batch (Rules 2, 3).

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
        self._held: HeldBack | None = None  # set by a storage failure (Rule 7)
        if checkpointer is not None:
            checkpointer.attach(conn)
            checkpointer.start()

    def execute(self, jobs: list[JobSpec]) -> list[Outcome]:
        if self._held is not None:
            if not (jobs and jobs[0].fn is resume_writes):
                return [(None, self._held)] * len(jobs)  # Rule 7: the failed batch first
            self._held = None
        with self._writing:
            try:
                try:
                    outcomes = self._transaction(jobs, savepoints=False)
                except _JobFailed:
                    self._rolled_back()
                    outcomes = self._transaction(jobs, savepoints=True)
            except sqlite3.Error as exc:
                self._rolled_back()
                failure: LedgerWriteFailed
                if storage_error(exc):
                    failure = StorageFailed(f"ledger write failed: {exc}")
                    self._held = HeldBack(f"held back behind a batch that failed: {exc}")
                else:
                    failure = LedgerWriteFailed(f"ledger write failed: {exc}")
                failure.__cause__ = exc
                return [(None, failure)] * len(jobs)
        if self._checkpointer is not None:
            self._checkpointer.committed()
        return outcomes

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
        self._conn.close()

    def _transaction(self, jobs: list[JobSpec], *, savepoints: bool) -> list[Outcome]:
        conn = self._conn
        outcomes: list[Outcome] = []
        failed = False
        try:
            conn.execute("BEGIN IMMEDIATE")
            for job in jobs:
                if savepoints:
                    conn.execute("SAVEPOINT job")
                try:
                    value = job.run(conn)
                except Exception as exc:  # the job's own failure, for its caller
                    if storage_error(exc):
                        raise  # the storage's, not the job's: the whole batch (Rule 3)
                    if not savepoints:
                        raise _JobFailed from exc
                    conn.execute("ROLLBACK TO job")
                    outcomes.append((None, exc))
                    failed = True
                else:
                    outcomes.append((value, None))
                if savepoints:
                    conn.execute("RELEASE job")
            if self._before_commit is not None:
                self._before_commit(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if failed:
            self._rolled_back()  # caches may hold what a failed job wrote
        return outcomes

    def _rolled_back(self) -> None:
        if self._on_rollback is not None:
            self._on_rollback()


class LedgerWriter:
    """Queues jobs and runs them in batches over a `BatchLink` (see the rules above).

    Two tasks: the sender hands over the next batch when the link is idle;
    the receiver takes the outcomes in order, hands over the next batch
    itself when jobs wait, and then tells the callers. So under load the link
    carries the next batch while the callbacks run, and a batch costs the
    event loop one task switch, not three.
    """

    def __init__(
        self,
        executor: BatchLink | Transactor | sqlite3.Connection,
        *,
        max_batch: int = 2048,
        max_queue: int = 100_000,
        lazy_s: float = 0.05,
        on_rollback: Callable[[], None] | None = None,
        fail_exit_s: float = math.inf,
    ) -> None:
        if isinstance(executor, sqlite3.Connection):
            executor = Transactor(executor, on_rollback)
        self._link = ThreadLink(executor) if isinstance(executor, Transactor) else executor
        self._max_batch = max_batch
        self._max_queue = max_queue
        self._queue: deque[Pending[Any]] = deque()
        self._lazy: deque[Pending[Any]] = deque()  # Rule 6
        self._lazy_s = lazy_s
        self._lazy_since = 0.0  # when the oldest waiting lazy job was submitted
        self._last: Pending[Any] | None = None  # the newest job of `submit` (for `settled`)
        self._wake = anyio.Event()
        self._next_batch_done = anyio.Event()  # for the batch `_send_batch` forms next
        # Batches handed to the link whose outcomes have not come back yet.
        self._handed: deque[list[Pending[Any]]] = deque()
        self._link_has_room = anyio.Event()  # set when the receiver takes a batch back
        self._link_has_work = anyio.Event()  # set when the sender hands one over
        self._sending = False  # a `link.send` is under way (sender or receiver)
        # Committed batches whose callers are not told yet.
        self._committed: deque[tuple[list[Pending[Any]], list[Outcome]]] = deque()
        self._closed = False
        self._dead: WriterDied | None = None
        self.commits = 0
        self.jobs = 0
        # Rule 7: storage failures.
        self.failure: WriteFailure | None = None
        self._failure_changed = anyio.Event()
        self._fail_exit_s = fail_exit_s
        self._retrying = True  # False once the writer stops: failures go to the callers
        self._held_back: list[Pending[Any]] = []  # failed jobs, until the link is empty
        self._resume = False  # the next batch is led by `resume_writes`
        self._retry_at = -math.inf  # no batch is sent before this time
        self._retry_s = RETRY_FIRST_S

    @property
    def queued(self) -> int:
        return len(self._queue) + len(self._lazy)

    @property
    def dead(self) -> WriterDied | None:
        """Why nothing can be written any more, once the link is gone; else None."""
        return self._dead

    def _next_batch_event(self) -> anyio.Event:
        return self._next_batch_done

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Pending[T]:
        """Queue `fn(conn, *args, **kwargs)` without waiting.

        Raises WriterOverloaded or WriterClosed.
        """
        pending = self._pending(fn, args, kwargs)
        self._queue.append(pending)
        self._last = pending
        self._wake.set()
        return pending

    def submit_lazy(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Pending[T]:
        """Like `submit`, for a job that may wait a little for company (Rule 6)."""
        pending = self._pending(fn, args, kwargs)
        if not self._lazy:
            self._lazy_since = anyio.current_time()
            self._wake.set()  # the sender sets its timer
        self._lazy.append(pending)
        return pending

    def _pending(self, fn: Callable[..., T], args: Any, kwargs: Any) -> Pending[T]:
        if self._closed:
            raise WriterClosed("the ledger writer has stopped")
        if len(self._queue) + len(self._lazy) >= self._max_queue:
            raise WriterOverloaded("the ledger writer queue is full")
        return Pending(JobSpec(fn, args, kwargs), self._next_batch_event)

    async def call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        return await self.submit(fn, *args, **kwargs).result()

    async def settled(self) -> None:
        """Return once every job submitted so far with `submit` is resolved, committed
        or failed (at once when none is open), so a read from here on sees them.
        Lazy jobs are not waited for: they commute with everything (Rule 6)."""
        if self._last is not None:
            # Jobs resolve in submission order (Rule 3 and `_resolve_committed`).
            await self._last.wait()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Run until cancelled; then finish what was queued and stop taking jobs.

        Raises WriterDied if the link is gone (the writer process died):
        nothing can be written any more, so the daemon must stop.
        """
        task_status.started()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._receiver)
                tg.start_soon(self._watch_failure)
                while self._dead is None:
                    if not self._queue:
                        self._wake = anyio.Event()
                        if not self._lazy:
                            await self._wake.wait()
                            continue
                        with anyio.move_on_after(self._lazy_due() - anyio.current_time()):
                            await self._wake.wait()
                        if not self._queue and anyio.current_time() < self._lazy_due():
                            continue
                    await self._room()
                    if self._held_back or self._backing_off():
                        # Rule 7: failed jobs are coming back, or wait out their back-off.
                        self._wake = anyio.Event()
                        back_off = self._retry_at - anyio.current_time()
                        with anyio.move_on_after(math.inf if self._held_back else back_off):
                            await self._wake.wait()
                        continue
                    if self._sending:  # the receiver is handing a batch over: after it
                        self._wake = anyio.Event()
                        await self._wake.wait()
                        continue
                    # (The receiver may also have taken the whole queue meanwhile.)
                    await self._send_batch()
                tg.cancel_scope.cancel()
            assert self._dead is not None
            raise self._dead  # outside the task group: not wrapped in a group
        finally:
            self._closed = True
            self.stop_retrying()
            with anyio.CancelScope(shield=True):
                # The receiver is gone: hand over and take back here, in turn.
                while (self._waiting() and self._dead is None) or self._handed:
                    if (
                        self._waiting()
                        and self._dead is None
                        and self._fits()
                        and not self._held_back
                    ):
                        await self._send_batch()
                    else:
                        await self._receive_batch()
                self._fail_queued()
            self._resolve_committed()

    def _backing_off(self) -> bool:
        # The clock is read only after a storage failure: it costs a backend lookup.
        return self._retry_at != -math.inf and self._retry_at > anyio.current_time()

    def _fits(self) -> bool:
        return len(self._handed) < self._link.depth

    def _waiting(self) -> bool:
        return bool(self._queue or self._lazy)

    def _lazy_due(self) -> float:
        return self._lazy_since + self._lazy_s

    async def _room(self) -> None:
        """Wait until the link takes another batch (or the receiver found it dead)."""
        while not self._fits() and self._dead is None:
            self._link_has_room = anyio.Event()
            await self._link_has_room.wait()

    async def _send_batch(self) -> None:
        if self._dead is not None or self._sending or not self._waiting():
            return
        if self._held_back or self._backing_off():
            return  # Rule 7: the failed jobs go first, after the back-off
        lazy, queue = self._lazy, self._queue
        batch = [lazy.popleft() for _ in range(min(len(lazy), self._max_batch))]
        batch += [queue.popleft() for _ in range(min(len(queue), self._max_batch - len(batch)))]
        if self._resume:
            self._resume = False
            batch.insert(0, Pending(JobSpec(resume_writes, (), {}), self._next_batch_event))
        done, self._next_batch_done = self._next_batch_done, anyio.Event()
        for pending in batch:
            pending._batch_done = done
        self._handed.append(batch)
        self._link_has_work.set()
        self._sending = True
        try:
            await self._link.send([p.job for p in batch])  # all or nothing (BatchLink)
        except WriterDied as exc:
            self._died(exc)
        finally:
            self._sending = False
            if self._waiting():
                self._wake.set()  # the sender may be waiting for this send to end

    async def _receiver(self) -> None:
        while True:
            while not self._handed:
                self._link_has_work = anyio.Event()
                await self._link_has_work.wait()
            await self._receive_batch()
            if self._queue and self._fits():
                # Before the callbacks: the transactions need not wait for them.
                await self._send_batch()
            self._resolve_committed()

    async def _receive_batch(self) -> None:
        """Take the outcomes of the oldest handed batch; `_resolve_committed` tells the callers."""
        batch = self._handed[0]
        if self._dead is not None:
            outcomes: list[Outcome] = [(None, self._dead)] * len(batch)
        else:
            # Not shielded: a cancelled receive takes nothing (BatchLink), and
            # `run` takes the batch back itself, shielded (Rule 4).
            try:
                outcomes = await self._link.receive()
            except WriterDied as exc:
                self._died(exc)
                outcomes = [(None, exc)] * len(batch)
        self._handed.popleft()
        self._link_has_room.set()
        # A storage failure fails every job that reached the transaction, so a
        # batch whose first job succeeded committed: no scan of it on that path.
        failed = None
        if outcomes[0][1] is not None:
            failed = next((e for _, e in outcomes if isinstance(e, StorageFailed)), None)
        if failed is None and not all(isinstance(e, LedgerWriteFailed) for _, e in outcomes):
            self.commits += 1
            self.jobs += len(batch)
            self._recovered()
        if failed is not None:
            self._storage_failed(failed)
            if self._retrying:
                batch, outcomes = self._hold_back(batch, outcomes)
            else:
                self._resume = True  # no retries: the next batch still gets its own try
        if self._held_back and not self._handed:
            self._put_back()  # every batch behind the failed one is back: resend in order
        if batch:
            self._committed.append((batch, outcomes))

    # -- Rule 7: storage failures ----------------------------------------------

    def _hold_back(
        self, batch: list[Pending[Any]], outcomes: list[Outcome]
    ) -> tuple[list[Pending[Any]], list[Outcome]]:
        """Keep the jobs the storage failed, to run again; the rest resolve as they are."""
        done = batch[0]._batch_done
        rest: list[Pending[Any]] = []
        rest_outcomes: list[Outcome] = []
        for pending, outcome in zip(batch, outcomes, strict=True):
            if not isinstance(outcome[1], StorageFailed):
                rest.append(pending)  # a job refused on its own (an unpicklable one)
                rest_outcomes.append(outcome)
            elif pending.job.fn is not resume_writes:
                self._held_back.append(pending)
                pending._batch_done = None  # it waits for the batch that takes it next
        if done is not None and not rest:
            done.set()  # its waiters wait again, on their new batch
        return rest, rest_outcomes

    def _put_back(self) -> None:
        self._queue.extendleft(reversed(self._held_back))
        self._held_back.clear()
        self._resume = True
        if self._retrying:
            self._retry_at = anyio.current_time() + self._retry_s
            self._retry_s = min(self._retry_s * 2, RETRY_MAX_S)
        self._wake.set()

    def _storage_failed(self, error: StorageFailed) -> None:
        if isinstance(error, HeldBack):
            return  # not a new failure: the first one's error says what failed
        if self.failure is None:
            self.failure = WriteFailure(int(time.time() * 1000), anyio.current_time(), str(error))
            log.error(
                "ledger writes failing",
                error=str(error),
                retry="the failed writes run again, in order, until they commit",
                exit_after_s=self._fail_exit_s,
            )
            self._failure_changed.set()
        else:
            self.failure = self.failure._replace(error=str(error))

    def _recovered(self) -> None:
        if self.failure is not None:
            self._retry_s = RETRY_FIRST_S
            self._retry_at = -math.inf
            failed_s = anyio.current_time() - self.failure.since
            log.info("ledger writes recovered", failed_for_s=round(failed_s, 3))
            self.failure = None
            self._failure_changed.set()

    def stop_retrying(self) -> None:
        """From now on a storage failure fails its jobs' callers (at a shutdown)."""
        self._retrying = False
        self._retry_at = -math.inf
        if self._held_back and not self._handed:
            self._put_back()
        self._wake.set()

    async def _watch_failure(self) -> None:
        """End the writer when the storage fails for longer than `fail_exit_s`."""
        while True:
            self._failure_changed = anyio.Event()
            failure = self.failure
            if failure is None:
                await self._failure_changed.wait()
                continue
            remaining = failure.since + self._fail_exit_s - anyio.current_time()
            if remaining <= 0:
                self._died(
                    WriterStuck(
                        f"the ledger could not write for {self._fail_exit_s:g} s: {failure.error}"
                    )
                )
                return
            with anyio.move_on_after(remaining):
                await self._failure_changed.wait()

    def _died(self, exc: WriterDied) -> None:
        if self._dead is None:
            self._dead = exc
        self._wake.set()
        self._link_has_room.set()

    def _fail_queued(self) -> None:
        """After a death: what was never handed over fails with it."""
        if self._dead is not None and (self._waiting() or self._held_back):
            batch = [*self._held_back, *self._lazy, *self._queue]
            self._held_back.clear()
            self._lazy.clear()
            self._queue.clear()
            self._committed.append((batch, [(None, self._dead)] * len(batch)))

    def _resolve_committed(self) -> None:
        """Tell callers their outcomes, batch by batch in commit order."""
        while self._committed:
            batch, outcomes = self._committed.popleft()
            for pending, (value, error) in zip(batch, outcomes, strict=True):
                pending._resolve(value, error)
            done = batch[0]._batch_done if batch else None
            if done is None:  # never handed over (`_fail_queued`): its callers wait here
                done, self._next_batch_done = self._next_batch_done, anyio.Event()
            done.set()

    async def aclose(self) -> None:
        """Release the link (its connection or its process)."""
        with anyio.CancelScope(shield=True):
            await self._link.aclose()
