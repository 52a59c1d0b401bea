"""The library face's calls through the daemon (`ledger/port/protocols.py` LibraryPort), beside
`ledger/sqlite/store.py` so that the `Ledger` class stays small: `ledger/api/served.py` plans
each call as a write on the writer or a read on the reader pool, and shapes its answer.
"""

from __future__ import annotations

from typing import Any, TypeVar

from ledger.api import served
from ledger.sqlite.reads import ReaderPool
from ledger.writer.group_commit import LedgerWriter

T = TypeVar("T")


class LibraryMethods:
    writer: LedgerWriter

    readers: ReaderPool  # SqliteReads', beside this class in `Ledger`'s bases

    async def library_call(self, call: str, args: dict[str, Any], now: int) -> Any:
        kind, what = served.plan(call, args, now)
        if kind == "write":
            value = await self.writer.call(what.fn, *what.args)
        else:
            value = await self.readers.run(what)
        return served.answer(call, value)
