"""The SQLite ledger's `ThreadPort`: resets, a session's threads, and cancelling a
waiting item.

A reset only decides a new thread (pending until the session's actor makes the
cut: `ledger/threads.py`), so it never races a turn in flight.
"""

from __future__ import annotations

from typing import Any

from ledger import resets, threads
from ledger.sqlite.connections import Connected


class SqliteThreads(Connected):
    async def reset_session(self, session: str, reason: str, now: int) -> int:
        return await self.writer.call(resets.reset, session, reason, now)

    async def list_threads(self, session: str) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: threads.list_threads(c, session))

    async def cancel_item(self, session: str, item: str, now: int) -> None:
        await self.writer.call(threads.cancel_item, session, item, now)
