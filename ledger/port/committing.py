"""`Committing`: a write queued on the ledger, as the port's `submit_*` methods return
it, and `Admits`, the wait for room before one. A module of its own so that every
part of the port can name them.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

T_co = TypeVar("T_co", covariant=True)


class Committing(Protocol[T_co]):
    """A write queued on the ledger; `Pending` of ledger/writer/jobs.py is one."""

    @property
    def done(self) -> bool: ...

    def get(self) -> T_co:
        """The outcome of a write that is `done`: its result, or its error raised."""
        ...

    async def wait(self) -> None:
        """Return once the write is resolved, committed or failed (without raising)."""
        ...

    async def result(self) -> T_co: ...


class Admits(Protocol):
    def has_room(self) -> bool:
        """Would `admit` return at once? For a submitter that cannot await where it
        writes: it writes at once while this holds, else awaits `admit` first."""
        ...

    async def admit(self) -> None:
        """Wait for room for one more `submit_*` write (ledger/port/protocols.py).

        Returns at once, without yielding, while the ledger's queue of writes has
        room; else once it has, so the `submit_*` call that follows without yielding
        is taken. Raises `WriterOverloaded` (ledger/writer/admission.py) when no room came
        within the ledger's bound on the wait, `WriterClosed` once it stopped."""
        ...
