"""The daemon's expiry loop on virtual time: at start, then hourly, a failed run tried
again an hour later, and `health`'s view of it; nothing runs with keep_days 0."""

from __future__ import annotations

from typing import Any, cast

import anyio
import pytest
from trio.testing import MockClock

from broker.retention import DAY_MS, EVERY_S, Retention, own_keep_days
from broker.router import Router
from ledger.port.protocols import LedgerPort
from ledger.port.retention import SessionRoute
from policies.model import Match, Rule

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> Any:
    return ("trio", {"clock": MockClock(autojump_threshold=0)})


class FakeLedger:
    def __init__(self, fail_at: int | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.fail_at = fail_at

    async def expire_before(self, cutoff: int, now: int) -> int:
        self.calls.append((cutoff, now))
        if len(self.calls) == self.fail_at:
            raise RuntimeError("the disk is full")
        return 5


async def test_expiry_runs_at_start_then_hourly_and_survives_a_failure() -> None:
    ledger = FakeLedger(fail_at=2)
    retention = Retention(cast(LedgerPort, ledger), 2.0)
    assert retention.status() == {"keep_days": 2.0, "last_run": None, "expired_turns": 0}
    async with anyio.create_task_group() as tg:
        await tg.start(retention.run)
        await anyio.sleep(EVERY_S * 2.5)
        tg.cancel_scope.cancel()
    assert len(ledger.calls) == 3  # at start, +1 h (failed), +2 h
    assert all(now - cutoff == 2 * DAY_MS for cutoff, now in ledger.calls)
    status = retention.status()
    assert status["expired_turns"] == 5 and status["last_run"] is not None


async def test_nothing_expires_with_keep_days_zero() -> None:
    ledger = FakeLedger()
    retention = Retention(cast(LedgerPort, ledger), 0)
    async with anyio.create_task_group() as tg:
        await tg.start(retention.run)
        await anyio.sleep(EVERY_S * 3)
        tg.cancel_scope.cancel()
    assert ledger.calls == []
    assert retention.status()["last_run"] is None


def test_each_session_follows_its_latest_messages_rule_and_workers_their_parent() -> None:
    routes = [
        SessionRoute("dm:ann", None, "chat", "dm", "ann"),
        SessionRoute("group:chat:room", None, "chat", "group", "bob"),
        SessionRoute("worker:1", "group:chat:room", None, None, None),
        SessionRoute("fork:2", "worker:1", None, None, None),
        SessionRoute("dm:kept", None, "mail", "dm", "cy"),
        SessionRoute("lib:x", None, None, None, None),
    ]

    def rule_days(channel: str, peer_kind: str, sender: str) -> float | None:
        return {"group": 0.25, "dm": 0.0 if channel == "mail" else None}[peer_kind]

    assert own_keep_days(routes, rule_days, 30.0) == {
        "group:chat:room": 0.25,
        "worker:1": 0.25,
        "fork:2": 0.25,
        "dm:kept": 0.0,
    }
    assert own_keep_days(routes, lambda c, k, s: None, 30.0) == {}


class RoutedLedger(FakeLedger):
    async def session_routes(self) -> list[SessionRoute]:
        return [
            SessionRoute("group:chat:room", None, "chat", "group", "bob"),
            SessionRoute("dm:ann", None, "chat", "dm", "ann"),
        ]

    async def expire_before(
        self, cutoff: int | None, now: int, cutoffs: dict[str, int | None] | None = None
    ) -> int:
        self.seen = (cutoff, now, cutoffs)
        return 2


async def test_a_rules_keep_days_replaces_the_global_one_under_the_current_rules() -> None:
    rules = (Rule(name="groups", match=Match(peer_kind=["group"]), keep_days=0.5),)
    router = Router(rules, frozenset())
    ledger = RoutedLedger()
    retention = Retention(cast(LedgerPort, ledger), 0, router)  # the global: forever
    assert await retention.run_once() == 2
    cutoff, now, cutoffs = ledger.seen
    assert cutoff is None and cutoffs == {"group:chat:room": now - DAY_MS // 2}
    assert retention.status()["rules"] == {"groups": 0.5}
    router.update(
        (Rule(name="groups", match=Match(peer_kind=["group"]), keep_days=0),), frozenset()
    )
    del ledger.seen
    assert await retention.run_once() == 0  # a reload: the group is kept forever now
    assert not hasattr(ledger, "seen")  # nothing to expire anywhere: not even a sweep
    retention.keep_days = 7  # a global one beside it: the group is still kept
    assert await retention.run_once() == 2
    assert ledger.seen[0] == ledger.seen[1] - 7 * DAY_MS
    assert ledger.seen[2] == {"group:chat:room": None}
