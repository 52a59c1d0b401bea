"""Operator ops for timers (`timer.*`): one small async function per op (see ops.py)."""

from __future__ import annotations

from typing import Any

from broker.connection import Connection
from broker.timers import Timers, spec_of
from ledger.port.protocols import LedgerPort
from plumbing import logs
from plumbing.ids import now_ms
from wire.frames import ArgSpec, check_args

log = logs.get("broker.ops")


class TimerOps:
    """`timer.add`, `timer.list`, `timer.cancel`; the wheel looks again after every change."""

    def __init__(self, ledger: LedgerPort, timers: Timers | None) -> None:
        self.ledger = ledger
        self.timers = timers
        self.table = {
            "timer.add": self.timer_add,
            "timer.list": self.timer_list,
            "timer.cancel": self.timer_cancel,
        }

    async def timer_add(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (ArgSpec("session", str, True),), req)
        now = now_ms()
        spec = spec_of(args, now, req)
        timer = await self.ledger.add_timer(a["session"], spec, now)
        if self.timers is not None:
            self.timers.changed()
        log.info("timer added", session=timer.session, timer=timer.timer, next_at=timer.next_at)
        return {"timer": timer.timer, "next_at": timer.next_at}

    async def timer_list(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (ArgSpec("session", str, False),), req)
        return [t.as_json() for t in await self.ledger.list_timers(a.get("session"))]

    async def timer_cancel(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (ArgSpec("timer", str, True, 64),), req)
        await self.ledger.cancel_timer(a["timer"], now_ms())
        if self.timers is not None:
            self.timers.changed()
        log.info("timer cancelled", timer=a["timer"])
        return {"timer": a["timer"], "status": "cancelled"}
