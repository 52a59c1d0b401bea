"""The SQLite ledger's `TimerPort`: timers added, listed, cancelled and fired.

Each write is one job of `ledger/timers.py` on the writer, so a timer fires with
its queue item and its next due time in one transaction: exactly once per due time.
"""

from __future__ import annotations

from core.timers import TimerSpec
from ledger import timers
from ledger.port.records import ItemInfo, OneTimer, TimerInfo
from ledger.sqlite.connections import Connected


class SqliteTimers(Connected):
    async def add_timer(self, session: str, spec: TimerSpec, now: int) -> TimerInfo:
        return await self.writer.call(timers.add, session, spec, now)

    async def list_timers(self, session: str | None) -> list[TimerInfo]:
        return await self.readers.run(lambda c: timers.list_live(c, session))

    async def cancel_timer(self, timer: str, now: int) -> None:
        await self.writer.call(timers.cancel, timer, now)

    async def next_timer_at(self) -> int | None:
        return await self.readers.run(timers.next_due)

    async def fire_due_timers(self, now: int, limit: int) -> list[ItemInfo]:
        return await self.writer.call(timers.fire_due, now, limit)

    async def fire_timer(self, timer: str, now: int) -> OneTimer:
        return await self.writer.call(timers.fire_one, timer, now)
