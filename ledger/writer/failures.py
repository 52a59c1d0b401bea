"""The writer's bookkeeping while the storage fails: since when and why, the jobs held
back behind a failed batch, when that batch may run again, and how long the writer
may wait for it.

One line is logged when writes start failing and one when they recover, not one per
failed batch. A failed batch runs again after a back-off of RETRY_FIRST_S, doubled at
each failure up to RETRY_MAX_S; the first batch that commits resets it.
"""

from __future__ import annotations

import math
import time
from typing import Any, NamedTuple

import anyio

from ledger.port.errors import HeldBack, StorageFailed, WriterStuck
from ledger.writer.jobs import Outcome, Pending, resume_writes
from plumbing import logs

log = logs.get("ledger.writer")  # what operators read these lines under
RETRY_FIRST_S = 0.1  # the back-off before a batch the storage failed runs again,
RETRY_MAX_S = 2.0  # doubled at each failure up to this


class WriteFailure(NamedTuple):
    """Writes fail on the storage since `since_ms` (wall clock); the latest error."""

    since_ms: int
    since: float  # the event loop's clock
    error: str

    def reason(self) -> str:
        failing_s = max(0.0, time.time() - self.since_ms / 1000)
        return f"the ledger cannot write (for {failing_s:.1f} s): {self.error}"


class StorageFailures:
    """The storage-failure state of one `LedgerWriter`, which holds it and keeps the queue."""

    def __init__(self, fail_exit_s: float) -> None:
        self.failure: WriteFailure | None = None
        self._changed = anyio.Event()
        self._fail_exit_s = fail_exit_s
        self.retrying = True  # False once the writer stops: failures go to the callers
        self.held_back: list[Pending[Any]] = []  # failed jobs, until the link is empty
        self._retry_at = -math.inf  # no batch is sent before this time
        self._retry_s = RETRY_FIRST_S

    def holding(self) -> bool:
        """Whether failed jobs are coming back, or wait out their back-off: no batch now."""
        if self.held_back:
            return True
        # The clock is read only after a storage failure: it costs a backend lookup.
        return self._retry_at != -math.inf and self._retry_at > anyio.current_time()

    def hold_off_s(self) -> float:
        """How long `holding` lasts at most: until woken, or the back-off's end."""
        return math.inf if self.held_back else self._retry_at - anyio.current_time()

    def hold_back(
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
                self.held_back.append(pending)
                pending._batch_done = None  # it waits for the batch that takes it next
        if done is not None and not rest:
            done.set()  # its waiters wait again, on their new batch
        return rest, rest_outcomes

    def take_back(self) -> list[Pending[Any]]:
        """The held-back jobs, to be sent again in order; their back-off starts now."""
        jobs, self.held_back = self.held_back, []
        if self.retrying:
            self._retry_at = anyio.current_time() + self._retry_s
            self._retry_s = min(self._retry_s * 2, RETRY_MAX_S)
        return jobs

    def failed(self, error: StorageFailed) -> None:
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
            self._changed.set()
        else:
            self.failure = self.failure._replace(error=str(error))

    def recovered(self) -> None:
        if self.failure is not None:
            self._retry_s = RETRY_FIRST_S
            self._retry_at = -math.inf
            failed_s = anyio.current_time() - self.failure.since
            log.info("ledger writes recovered", failed_for_s=round(failed_s, 3))
            self.failure = None
            self._changed.set()

    def stop_retrying(self) -> None:
        """From now on a storage failure fails its jobs' callers (at a shutdown)."""
        self.retrying = False
        self._retry_at = -math.inf

    async def stuck(self) -> WriterStuck:
        """Return once the storage has failed for longer than `fail_exit_s`."""
        while True:
            self._changed = anyio.Event()
            failure = self.failure
            if failure is None:
                await self._changed.wait()
                continue
            remaining = failure.since + self._fail_exit_s - anyio.current_time()
            if remaining <= 0:
                return WriterStuck(
                    f"the ledger could not write for {self._fail_exit_s:g} s: {failure.error}"
                )
            with anyio.move_on_after(remaining):
                await self._changed.wait()
