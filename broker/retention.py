"""Expiring old turns (`[retention] keep_days`): at start, then every hour.

The ledger does the expiring in bounded batches (ledger/retention.py), so the
writer serves everyone else between them. A failed run is logged and tried
again at the next hour; `health` shows the policy, when the last run ended and
how many turns it expired.

A route rule's own `keep_days` replaces the global one for its sessions. Sessions
do not record their rule: each run matches the latest message of every session
against the rules as they are now (a reload counts), so a session whose rule
changed follows the current one; a worker or fork follows its parent, and a
session no message came into (the library's) the global value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import TaskStatus

from broker.observe import hub
from broker.router import Router
from ledger.port.protocols import LedgerPort
from ledger.port.retention import SessionRoute
from plumbing import logs
from plumbing.ids import now_ms

log = logs.get("broker.retention")
EVERY_S = 3600.0
DAY_MS = 86_400_000


RuleDays = Callable[[str, str, str], float | None]
"""A message's (channel, peer kind, sender id) → its rule's own keep_days, or None."""


def own_keep_days(
    routes: list[SessionRoute], rule_days: RuleDays, keep_days: float
) -> dict[str, float]:
    """The sessions whose keep_days is not the global `keep_days`, with theirs."""
    parent = {r.label: r.parent for r in routes}
    days: dict[str, float] = {}
    for r in routes:
        if r.channel is not None and r.peer_kind is not None and r.sender_id is not None:
            own = rule_days(r.channel, r.peer_kind, r.sender_id)
            days[r.label] = keep_days if own is None else own

    def of(label: str) -> float:
        seen: set[str] = set()
        at: str | None = label
        while at is not None and at not in days and at not in seen:
            seen.add(at)
            at = parent.get(at)
        return days[at] if at is not None and at in days else keep_days

    return {r.label: d for r in routes if (d := of(r.label)) != keep_days}


def cutoff_of(keep_days: float, now: int) -> int | None:
    return None if keep_days <= 0 else now - int(keep_days * DAY_MS)


class Retention:
    def __init__(self, ledger: LedgerPort, keep_days: float, router: Router | None = None) -> None:
        self.ledger = ledger
        self.keep_days = keep_days
        self.router = router  # its rules may set their own keep_days
        self.last_run: int | None = None
        self.expired_turns = 0

    def rule_days(self) -> dict[str, float]:
        rules = self.router.rules if self.router is not None else ()
        return {r.name: r.keep_days for r in rules if r.keep_days is not None}

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "keep_days": self.keep_days,
            "last_run": self.last_run,
            "expired_turns": self.expired_turns,
        }
        if rules := self.rule_days():
            out["rules"] = rules  # the route rules with their own
        return out

    async def run_once(self) -> int:
        """Expire what `keep_days` (and the rules' own) say is old now; how many turns."""
        router = self.router
        if not self.rule_days() or router is None:
            if self.keep_days <= 0:
                return 0
            now = now_ms()
            expired = await self.ledger.expire_before(cutoff_of(self.keep_days, now), now)
        else:
            routes = await self.ledger.session_routes()
            own = own_keep_days(
                routes, lambda c, k, s: router.decision(c, k, s).keep_days, self.keep_days
            )
            now = now_ms()
            cutoffs = {label: cutoff_of(days, now) for label, days in own.items()}
            if self.keep_days <= 0 and not any(c is not None for c in cutoffs.values()):
                return 0
            expired = await self.ledger.expire_before(cutoff_of(self.keep_days, now), now, cutoffs)
        self.last_run, self.expired_turns = now_ms(), expired
        hub.observer.expiry(expired)
        return expired

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("expiry failed; tried again in an hour")
            await anyio.sleep(EVERY_S)
