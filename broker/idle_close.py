"""Closing the sessions a person has left (`[closing] idle_s`, a persona's
`close_idle_s`): every `every_s`, the ledger closes those idle past their limit.

A session closes here exactly as `session.close` closes it (ledger/closing.py), in
the ledger's own transaction, which refuses a session with pending work: nothing
running or waiting is ever cut off, and the session's next message opens a session
extending it. The settings are read at each round, so a reload applies at the next.
A failed round is logged and tried again at the next; a round closes batches until
none is left, so a backlog does not wait a round per batch.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio.abc import TaskStatus

from broker.config import ClosingSettings, Settings
from ledger.port.protocols import LedgerPort
from plumbing import logs
from plumbing.ids import now_ms

log = logs.get("broker.idle_close")


class IdleCloser:
    def __init__(
        self,
        ledger: LedgerPort,
        settings: Callable[[], Settings],
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.ledger = ledger
        self.settings = settings  # the daemon's, as of now (a reload replaces them)
        self.clock = clock
        self.closed = 0  # sessions closed since start

    async def run_once(self) -> int:
        """Close every session idle past its limit now; how many."""
        s = self.settings()
        policy = s.closing.policy(s.personas)
        if not policy.active:
            return 0
        count = 0
        while batch := await self.ledger.close_idle(policy, self.clock()):
            for closed in batch:
                log.info("session closed", session=closed["session"], reason="idle")
            count += len(batch)
        self.closed += count
        return count

    def every_s(self) -> float:
        closing: ClosingSettings = self.settings().closing
        return closing.every_s

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await anyio.sleep(self.every_s())
            try:
                await self.run_once()
            except Exception:
                log.exception("closing idle sessions failed; tried again at the next round")
