"""The library face's calls through the daemon (`ledger/port.py` LibraryPort), beside
`ledger/store.py` so that the `Ledger` class stays small: `ledger/api/served.py` plans
each call as a write on the writer or a read on the reader pool, and shapes its answer.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .api import served
from .writer import LedgerWriter

T = TypeVar("T")


class LibraryMethods:
    writer: LedgerWriter

    if TYPE_CHECKING:  # SqliteReads.read, beside this class in `Ledger`'s bases

        async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def library_call(self, call: str, args: dict[str, Any], now: int) -> Any:
        kind, what = served.plan(call, args, now)
        if kind == "write":
            value = await self.writer.call(what.fn, *what.args)
        else:
            value = await self.read(what)
        return served.answer(call, value)
