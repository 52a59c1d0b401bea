"""The ledger's one writer, with group commit.

One connection writes, and only the writer touches it. Each batch of jobs is one
transaction, run whole in one hop to where the connection lives (a child process, or
a worker thread), so no statement waits on the event loop and many callers share one
commit. A job is a function and its arguments, not a closure, so that it can run in
another process (jobs.py). A job that raises is rolled back alone and its caller gets
the exception; the other jobs of its batch commit (transactor.py). The writer only
resolves outcomes (`Pending`, in submission order) and wakes the tasks that await
them: what follows from a commit (an ack, a reply, an item's hand-off) runs in those
tasks, never in the writer's.

A caller learns its job's result only after the COMMIT that holds it returned; if
the COMMIT fails, nothing of the batch is kept. A failure of the storage (disk full,
I/O error: `storage_error`) is not the jobs' fault: while it lasts `failure` says
since when and why, the batch is run again after a back-off, ahead of every later
job, until it commits, and the executor runs no batch after a failed one (`HeldBack`)
until the failed one comes again, led by `resume_writes`, so the writes keep their
order; failures.py keeps that state. Storage that stays unwritable for `fail_exit_s`
ends the writer with `WriterStuck`, which stops the daemon (crash-only: a restart
recovers). Any other failure fails every job of the batch with `LedgerWriteFailed`.

A batch, once handed over, finishes even if the writer is cancelled; on cancellation
the writer also finishes every job already queued, then refuses new ones, and stops
retrying storage failures (what fails then fails its callers, for crash recovery at
the next start). A cancelled caller's write may still have happened; jobs are
idempotent by id, so a retry is harmless.

Backpressure waits: every submitter that can flood the queue (the ingress, the
actors, replies and their confirmations) is admitted first (`admit(wait_s)`,
admission.py), which waits while `max_queue` jobs wait; `submit` itself never refuses
a job for a full queue, and the others (an operator's op, the timer sweep, a reload)
await each write they make, one at a time. A lazy job (`submit_lazy`) waits up to
`lazy_s` for a batch to join, so a write nobody waits on (a delivery confirmation)
does not cost a transaction of its own; it goes at the head of the batch it joins, so
only jobs that commute with every other job may be lazy. A job submitted to run last
(`submit_last`) goes at the end of the next batch, ahead of older jobs that batch has
no room for, so its outcome comes as soon after it ran as a commit allows (a lease's
renewal, whose time counts from when it ran); it too must commute with every other
job, and `settled` does not wait for it.
"""

from __future__ import annotations

import math
import sqlite3
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

import anyio
import anyio.abc

from ledger import audit, leases
from ledger.port.cipher import Connection
from ledger.port.errors import LeaseFenced, LedgerWriteFailed, StorageFailed, WriterDied
from ledger.port.errors import WriterClosed as WriterClosed  # their old home, for importers
from ledger.port.errors import WriterOverloaded as WriterOverloaded
from ledger.port.fencing import FENCE, Fence
from ledger.writer.admission import Admission
from ledger.writer.failures import StorageFailures, WriteFailure
from ledger.writer.jobs import JobSpec, Outcome, Pending, resume_writes
from ledger.writer.transactor import BatchExecutor, Transactor

T = TypeVar("T")


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


class _Fenced(Pending[T]):
    """A fenced job's outcome: a refusal also tells its fence, at once."""

    __slots__ = ("fence",)

    def __init__(self, job: JobSpec, next_batch: Callable[[], anyio.Event], fence: Fence) -> None:
        super().__init__(job, next_batch)
        self.fence = fence

    def _resolve(self, value: Any, error: BaseException | None) -> None:
        super()._resolve(value, error)
        if isinstance(error, LeaseFenced):
            self.fence.on_refused()


class LedgerWriter:
    """Queues jobs and runs them in batches over a `BatchLink` (see the rules above).

    Two tasks: the sender hands over the next batch when the link is idle;
    the receiver takes the outcomes in order, hands over the next batch
    itself when jobs wait, and then resolves the callers' outcomes. So
    under load the link carries the next batch while the callers act on theirs,
    and a batch costs the event loop one task switch, not three.
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
        if isinstance(executor, Connection):  # either driver's
            executor = Transactor(executor, on_rollback)
        self._link = (
            ThreadLink(executor) if isinstance(executor, Transactor) else cast(BatchLink, executor)
        )
        self._max_batch = max_batch
        self._max_queue = max_queue
        self._admission = Admission(self.has_room, lambda: self._closed)
        self.admit = self._admission.admit  # backpressure
        self._queue: deque[Pending[Any]] = deque()
        self._lazy: deque[Pending[Any]] = deque()  # jobs waiting for a batch to join
        self._tail: deque[Pending[Any]] = deque()  # jobs for the end of the next batch
        self._lazy_s = lazy_s
        self._lazy_since = 0.0  # when the oldest waiting lazy job was submitted
        self._last: Pending[Any] | None = None  # the newest job of `submit` (for `settled`)
        self._wake = anyio.Event()
        self._next_batch_done = anyio.Event()  # for the batch `_send_batch` forms next
        # Batches handed to the link whose outcomes have not come back yet.
        self._handed: deque[list[Pending[Any]]] = deque()
        self._handed_at: deque[float] = deque()  # when each was handed (for `on_batch`)
        # Told the size of each batch that committed and the seconds from its hand-over
        # to its outcomes (the daemon's metrics); must not block.
        self.on_batch: Callable[[int, float], None] | None = None
        self._link_has_room = anyio.Event()  # set when the receiver takes a batch back
        self._link_has_work = anyio.Event()  # set when the sender hands one over
        self._sending = False  # a `link.send` is under way (sender or receiver)
        # Committed batches whose callers are not told yet.
        self._committed: deque[tuple[list[Pending[Any]], list[Outcome]]] = deque()
        self._closed = False
        self._dead: WriterDied | None = None
        self.commits = 0
        self.jobs = 0
        self._failures = StorageFailures(fail_exit_s)  # while the storage fails
        self._resume = False  # the next batch is led by `resume_writes`

    @property
    def queued(self) -> int:
        return len(self._queue) + len(self._lazy)

    def has_room(self) -> bool:
        """Would `admit` return at once? (ledger/writer/admission.py)"""
        return len(self._queue) + len(self._lazy) < self._max_queue and not self._closed

    @property
    def failure(self) -> WriteFailure | None:
        """Since when and why writes fail on the storage; None while they commit."""
        return self._failures.failure

    @property
    def dead(self) -> WriterDied | None:
        """Why nothing can be written any more, once the link is gone; else None."""
        return self._dead

    def _next_batch_event(self) -> anyio.Event:
        return self._next_batch_done

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Pending[T]:
        """Queue `fn(conn, *args, **kwargs)` without waiting (room first: `admit`).

        Raises WriterClosed. A job submitted by a running clustered turn carries its
        lease's fence (ledger/port/fencing.py).
        """
        fence = FENCE.get()
        if fence is not None and fence.active:
            job = self._job(leases.fenced, (fence.session, fence.token, fn, *args), kwargs)
            pending: Pending[T] = _Fenced(job, self._next_batch_event, fence)
        else:
            pending = Pending(self._job(fn, args, kwargs), self._next_batch_event)
        self._queue.append(pending)
        self._last = pending
        self._wake.set()
        return pending

    def submit_lazy(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Pending[T]:
        """Like `submit`, for a job that may wait a little for company."""
        pending = self._pending(fn, args, kwargs)
        if not self._lazy:
            self._lazy_since = anyio.current_time()
            self._wake.set()  # the sender sets its timer
        self._lazy.append(pending)
        return pending

    def submit_last(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Pending[T]:
        """Like `submit`, for a job that commutes with every other: at the end of the
        next batch."""
        pending = self._pending(fn, args, kwargs)
        self._tail.append(pending)
        self._wake.set()
        return pending

    def _pending(self, fn: Callable[..., T], args: Any, kwargs: Any) -> Pending[T]:
        return Pending(self._job(fn, args, kwargs), self._next_batch_event)

    def _job(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> JobSpec:
        if self._closed:
            raise WriterClosed("the ledger writer has stopped")
        acting = audit.ACTING.get()
        row = acting.take() if acting is not None else None
        if row is not None:  # an operator op's first write carries its audit row
            return JobSpec(audit.run_audited, (row, fn, *args), kwargs)
        return JobSpec(fn, args, kwargs)

    async def call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        return await self.submit(fn, *args, **kwargs).result()

    async def settled(self) -> None:
        """Return once every job submitted so far with `submit` is resolved, committed
        or failed (at once when none is open), so a read from here on sees them.
        Lazy jobs are not waited for: they commute with everything."""
        if self._last is not None:
            # Jobs resolve in submission order, after their COMMIT (`_resolve_committed`).
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
                    if not self._queue and not self._tail:
                        self._wake = anyio.Event()
                        if not self._lazy:
                            await self._wake.wait()
                            continue
                        with anyio.move_on_after(self._lazy_due() - anyio.current_time()):
                            await self._wake.wait()
                        if (
                            not self._queue
                            and not self._tail
                            and anyio.current_time() < self._lazy_due()
                        ):
                            continue
                    await self._room()
                    if self._failures.holding():
                        # failed jobs are coming back, or wait out their back-off.
                        self._wake = anyio.Event()
                        with anyio.move_on_after(self._failures.hold_off_s()):
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
            self._admission.made_room()  # waiters learn that it closed
            self.stop_retrying()
            with anyio.CancelScope(shield=True):
                # The receiver is gone: hand over and take back here, in turn.
                while (self._waiting() and self._dead is None) or self._handed:
                    if (
                        self._waiting()
                        and self._dead is None
                        and self._fits()
                        and not self._failures.held_back
                    ):
                        await self._send_batch()
                    else:
                        await self._receive_batch()
                self._fail_queued()
            self._resolve_committed()

    def _fits(self) -> bool:
        return len(self._handed) < self._link.depth

    def _waiting(self) -> bool:
        return bool(self._queue or self._lazy or self._tail)

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
        if self._failures.holding():
            return  # the failed jobs go first, after the back-off
        lazy, queue, tail = self._lazy, self._queue, self._tail
        batch = [lazy.popleft() for _ in range(min(len(lazy), self._max_batch))]
        last = [tail.popleft() for _ in range(min(len(tail), self._max_batch - len(batch)))]
        batch += [
            queue.popleft()
            for _ in range(min(len(queue), self._max_batch - len(batch) - len(last)))
        ]
        batch += last
        self._admission.made_room()
        if self._resume:
            self._resume = False
            batch.insert(0, Pending(JobSpec(resume_writes, (), {}), self._next_batch_event))
        done, self._next_batch_done = self._next_batch_done, anyio.Event()
        for pending in batch:
            pending._batch_done = done
        self._handed.append(batch)
        self._handed_at.append(anyio.current_time())
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
            if (self._queue or self._tail) and self._fits():
                # Before resolving: the transactions need not wait for the callers.
                await self._send_batch()
            self._resolve_committed()

    async def _receive_batch(self) -> None:
        """Take the outcomes of the oldest handed batch; `_resolve_committed` tells the callers."""
        batch = self._handed[0]
        if self._dead is not None:
            outcomes: list[Outcome] = [(None, self._dead)] * len(batch)
        else:
            # Not shielded: a cancelled receive takes nothing (BatchLink), and
            # `run` takes the batch back itself, shielded.
            try:
                outcomes = await self._link.receive()
            except WriterDied as exc:
                self._died(exc)
                outcomes = [(None, exc)] * len(batch)
        self._handed.popleft()
        handed_at = self._handed_at.popleft()
        self._link_has_room.set()
        # A storage failure fails every job that reached the transaction, so a
        # batch whose first job succeeded committed: no scan of it on that path.
        failed = None
        if outcomes[0][1] is not None:
            failed = next((e for _, e in outcomes if isinstance(e, StorageFailed)), None)
        if failed is None and not all(isinstance(e, LedgerWriteFailed) for _, e in outcomes):
            self.commits += 1
            self.jobs += len(batch)
            self._failures.recovered()
            if self.on_batch is not None:
                self.on_batch(len(batch), anyio.current_time() - handed_at)
        if failed is not None:
            self._failures.failed(failed)
            if self._failures.retrying:
                batch, outcomes = self._failures.hold_back(batch, outcomes)
            else:
                self._resume = True  # no retries: the next batch still gets its own try
        if self._failures.held_back and not self._handed:
            self._put_back()  # every batch behind the failed one is back: resend in order
        if batch:
            self._committed.append((batch, outcomes))

    # -- storage failures (storage_failures.py keeps the state) --------

    def _put_back(self) -> None:
        self._queue.extendleft(reversed(self._failures.take_back()))
        self._resume = True
        self._wake.set()

    def stop_retrying(self) -> None:
        """From now on a storage failure fails its jobs' callers (at a shutdown)."""
        self._failures.stop_retrying()
        if self._failures.held_back and not self._handed:
            self._put_back()
        self._wake.set()

    async def _watch_failure(self) -> None:
        """End the writer when the storage fails for longer than `fail_exit_s`."""
        self._died(await self._failures.stuck())

    def _died(self, exc: WriterDied) -> None:
        if self._dead is None:
            self._dead = exc
        self._wake.set()
        self._link_has_room.set()

    def _fail_queued(self) -> None:
        """After a death: what was never handed over fails with it."""
        held_back = self._failures.held_back
        if self._dead is not None and (self._waiting() or held_back):
            batch = [*held_back, *self._lazy, *self._queue, *self._tail]
            held_back.clear()
            self._lazy.clear()
            self._queue.clear()
            self._tail.clear()
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
