"""`Committing`: a write queued on the ledger, as the port's `submit_*` methods return it
(ledger/port.py Rule 2). A module of its own so that every part of the port can name it."""

from __future__ import annotations

from typing import Protocol, TypeVar

T_co = TypeVar("T_co", covariant=True)


class Committing(Protocol[T_co]):
    """A write queued on the ledger (ledger/port.py Rule 2); `ledger.jobs.Pending` is one."""

    @property
    def done(self) -> bool: ...

    def get(self) -> T_co:
        """The outcome of a write that is `done`: its result, or its error raised."""
        ...

    async def wait(self) -> None:
        """Return once the write is resolved, committed or failed (without raising)."""
        ...

    async def result(self) -> T_co: ...
