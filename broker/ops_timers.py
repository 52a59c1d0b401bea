"""Operator ops for timers (`timer.*`): one small async function per op (see ops.py)."""

from __future__ import annotations

from typing import Any

from broker.core.timers import TimerSpec, TimerSpecError, parse_spec
from ledger import logs
from ledger.ids import now_ms
from ledger.port import LedgerPort

from .connection import Connection
from .framing import ProtocolError
from .protocol import ArgSpec, check_args
from .timers import Timers

log = logs.get("broker.ops")
TEXT = ArgSpec("text", str, True, 100_000)


def spec_of(args: dict[str, Any], now: int, req: str | None) -> TimerSpec:
    """The timer `args` ask for (`text`, `in_s` or `at`, `every_s?`), or `invalid` naming
    the field: the one validation of `timer.add` and of the agents' `schedule` tool."""
    text = check_args(args, (TEXT,), req)["text"]
    try:
        return parse_spec(text, args.get("in_s"), args.get("at"), args.get("every_s"), now)
    except TimerSpecError as exc:
        raise ProtocolError("invalid", str(exc), field=exc.field, req=req) from exc


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
