"""What the ledger writer runs and what its callers get back: a job, its
outcome, the ways a write fails, and the `Pending` a caller awaits.

A job is a function and its arguments, `fn(conn, *args, **kwargs)`, not a closure:
the transaction may run in another process (process.py), so both go there by pickle,
and a job that cannot be pickled fails alone, with an error saying so. Jobs are pure
functions of the database: they may run twice (a batch is run again with savepoints
when one of its jobs fails, or after a storage failure), and only the committed run
counts.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar

import anyio

T = TypeVar("T")
Outcome = tuple[Any, BaseException | None]


class JobSpec(NamedTuple):
    """What a transaction runs: `fn(conn, *args, **kwargs)`."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def run(self, conn: sqlite3.Connection) -> Any:
        return self.fn(conn, *self.args, **self.kwargs)


def resume_writes(conn: sqlite3.Connection) -> None:
    """A job that leads a batch sent again after a storage failure (group_commit.py)."""


class Pending(Generic[T]):
    """A submitted job: the outcome the writer resolves and its submitter awaits.

    The writer only resolves it (`_resolve`, in submission order) and wakes the
    job's batch; what follows from the outcome (an ack, a reply, the hand-off of
    an item) runs in the task that awaits it, never in the writer's own task.
    """

    __slots__ = ("_batch_done", "_done", "_error", "_next_batch", "_value", "job")

    def __init__(self, job: JobSpec, next_batch: Callable[[], anyio.Event]) -> None:
        self.job = job
        # Set when the batch that takes the job is resolved; until a batch takes it,
        # `next_batch()` is the event of the batch that will be formed next.
        self._batch_done: anyio.Event | None = None
        self._next_batch = next_batch
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None

    def _resolve(self, value: Any, error: BaseException | None) -> None:
        self._value = value
        self._error = error
        self._done = True

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
