"""The timer wheel: one task that fires due timers into their sessions' queues.

It sleeps until the earliest `next_at` in the ledger, or until `changed()` says an add
or a cancel may have moved it; never a loop of short sleeps. The sleep is also capped
at `MAX_SLEEP_S`, because due times are wall-clock times and the wall clock can be set
forward. The ledger decides and commits each firing with its queue item in one
transaction (`ledger/timers.py`); only then is the item handed to its session's actor
with `Mailboxes.post`, as worker results are, so a crash between the two loses
nothing (the registry's rehydration at start hands it over). At start it fires at once
every due time missed while the daemon was down (each timer once), after the mailboxes
rehydrated their backlog. Timer firings are not activity: the wheel touches nothing
but the timer, its firing and its item.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import anyio
import anyio.abc

from core.timers import TimerSpec, TimerSpecError, parse_spec
from ledger.port.errors import LedgerWriteFailed, WriterClosed
from ledger.port.protocols import TimerPort
from ledger.port.records import ItemInfo
from plumbing import logs
from plumbing.ids import now_ms
from wire.frames import ArgSpec, check_args
from wire.framing import ProtocolError

TEXT = ArgSpec("text", str, True, 100_000)


def spec_of(args: dict[str, Any], now: int, req: str | None) -> TimerSpec:
    """The timer `args` ask for (`text`, `in_s` or `at`, `every_s?`), or `invalid` naming
    the field: the one validation of `timer.add` and of the agents' `schedule` tool."""
    text = check_args(args, (TEXT,), req)["text"]
    try:
        return parse_spec(text, args.get("in_s"), args.get("at"), args.get("every_s"), now)
    except TimerSpecError as exc:
        raise ProtocolError("invalid", str(exc), field=exc.field, req=req) from exc


log = logs.get("broker.timers")
MAX_SLEEP_S = 60.0
BATCH = 1000  # firings in one transaction: 10,000 due timers commit in ten
RETRY_S = 1.0  # after a write the ledger refused (it retries by itself first)


class Timers(Protocol):
    """What the daemon and the ops need of the timers: this wheel, or the Temporal
    runtime's timer workflows (broker/runtime/temporal/timers.py)."""

    def changed(self) -> None: ...

    def stop(self) -> None: ...

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None: ...


class TimerWheel:
    def __init__(self, ledger: TimerPort, post: Callable[[ItemInfo], None]) -> None:
        # `post` is `Mailboxes.post`: an item to its session's actor.
        self.ledger = ledger
        self._post = post
        self._changed = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self.fired = 0

    def changed(self) -> None:
        """A timer was added or cancelled: look again at the earliest due time."""
        self._changed.set()

    def stop(self) -> None:
        """Fire nothing more (at shutdown, before the actors drain)."""
        if self._scope is not None:
            self._scope.cancel()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with anyio.CancelScope() as scope:
            self._scope = scope
            task_status.started()
            while True:
                try:
                    await self._fire_due()
                    await self._sleep_until_due()
                except WriterClosed:
                    return  # the daemon stops (it says why); the timers wait in the ledger
                except LedgerWriteFailed as exc:
                    # The writer retried this already; the daemon stops on
                    # a writer that stays dead. Try again later: a firing that did not
                    # commit left no trace, so it cannot fire twice.
                    log.error("could not fire due timers", error=str(exc))
                    await anyio.sleep(RETRY_S)

    async def _fire_due(self) -> None:
        while True:
            items = await self.ledger.fire_due_timers(now_ms(), BATCH)
            post = self._post
            for item in items:
                post(item)
            self.fired += len(items)
            if items:
                log.info("timers fired", items=len(items))
            if len(items) < BATCH:
                return

    async def _sleep_until_due(self) -> None:
        # A fresh event before reading: a change made while we read wakes us.
        self._changed = anyio.Event()
        due = await self.ledger.next_timer_at()
        delay = MAX_SLEEP_S if due is None else (due - now_ms()) / 1000
        if delay <= 0:
            return
        with anyio.move_on_after(min(delay, MAX_SLEEP_S)):
            await self._changed.wait()
