"""When a session workflow's run ends for quiet (workflow.py).

Workflow code: deterministic, its time the workflow's clock, its timer durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow


class IdleTimer:
    """One durable timer serves many quiet spells of a run. One started
    after every turn and cancelled by the next arrival cost two history events and
    a timer task of the server a turn."""

    def __init__(self) -> None:
        self.since: float | None = None  # the quiet spell's start; None while busy
        self._timer: asyncio.Task[None] | None = None

    async def wait(self, now: float, idle_s: float, due: Callable[[], bool]) -> bool:
        """False once quiet for `idle_s`; else True when `due()` or the timer fired."""
        if self.since is None:
            self.since = now
        left = self.since + idle_s - now
        if left <= 0:
            return False
        timer = self._timer
        if timer is None or timer.done():
            timer = self._timer = asyncio.create_task(workflow.sleep(left))
        await workflow.wait_condition(lambda: due() or timer.done())
        return True
