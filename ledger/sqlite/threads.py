"""The SQLite ledger's `ThreadPort`: resets, a session's threads, cancelling a
waiting item and closing a session (by an op, or idle).

A reset only decides a new thread (pending until the session's actor makes the
cut: `ledger/threads.py`), so it never races a turn in flight.
"""

from __future__ import annotations

from typing import Any

from core.closing import IdleClose
from ledger import closing, resets, threads
from ledger.sqlite.connections import Connected


class SqliteThreads(Connected):
    async def reset_session(self, session: str, reason: str, now: int) -> int:
        return await self.writer.call(resets.reset, session, reason, now)

    async def list_threads(self, session: str) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: threads.list_threads(c, session))

    async def cancel_item(self, session: str, item: str, now: int) -> None:
        await self.writer.call(threads.cancel_item, session, item, now)

    async def close_session(self, session: str, summary: str | None, now: int) -> dict[str, Any]:
        return await self.writer.call(closing.close_session, session, summary, now)

    async def close_idle(self, policy: IdleClose, now: int) -> list[dict[str, Any]]:
        labels = await self.readers.run(lambda c: closing.idle_candidates(c, policy, now))
        if not labels:
            return []
        return await self.writer.call(closing.close_idle, labels, policy, now)
