"""The SQLite ledger's `LibraryPort`: the library face's calls through the daemon.

`ledger/api/served.py` plans each call as a write on the writer or a read on a
reader, and shapes its answer: the same jobs and reads as the in-process `Store`,
so a daemon's sessions and a library's share one serial order per session.
"""

from __future__ import annotations

from typing import Any

from ledger.api import served
from ledger.sqlite.connections import Connected


class SqliteLibrary(Connected):
    async def library_call(self, call: str, args: dict[str, Any], now: int) -> Any:
        kind, what = served.plan(call, args, now)
        if kind == "write":
            value = await self.writer.call(what.fn, *what.args)
        else:
            value = await self.readers.run(what)
        return served.answer(call, value)
