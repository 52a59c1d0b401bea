"""`Committing`: a write queued on the ledger, as the port's `submit_*` methods return it
(ledger/port.py Rule 2). A module of its own so that every part of the port can name it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

T_co = TypeVar("T_co", covariant=True)


class Committing(Protocol[T_co]):
    """A write queued on the ledger (Rule 2); `ledger.jobs.Pending` is one."""

    @property
    def done(self) -> bool: ...

    def after_commit(
        self,
        callback: Callable[[T_co], None],
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None: ...

    async def wait(self) -> None: ...

    async def result(self) -> T_co: ...
