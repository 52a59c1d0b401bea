"""Expiring old turns (`[retention] keep_days`): at start, then every hour.

The ledger does the expiring in bounded batches (ledger/retention.py), so the
writer serves everyone else between them. A failed run is logged and tried
again at the next hour; `health` shows the policy, when the last run ended and
how many turns it expired.
"""

from __future__ import annotations

from typing import Any

import anyio
from anyio.abc import TaskStatus

from ledger.port.protocols import LedgerPort
from plumbing import logs
from plumbing.ids import now_ms

log = logs.get("broker.retention")
EVERY_S = 3600.0
DAY_MS = 86_400_000


class Retention:
    def __init__(self, ledger: LedgerPort, keep_days: float) -> None:
        self.ledger = ledger
        self.keep_days = keep_days
        self.last_run: int | None = None
        self.expired_turns = 0

    def status(self) -> dict[str, Any]:
        return {
            "keep_days": self.keep_days,
            "last_run": self.last_run,
            "expired_turns": self.expired_turns,
        }

    async def run_once(self) -> int:
        """Expire what `keep_days` says is old now; how many turns."""
        if self.keep_days <= 0:
            return 0
        now = now_ms()
        expired = await self.ledger.expire_before(now - int(self.keep_days * DAY_MS), now)
        self.last_run, self.expired_turns = now_ms(), expired
        return expired

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("expiry failed; tried again in an hour")
            await anyio.sleep(EVERY_S)
