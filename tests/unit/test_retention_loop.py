"""The daemon's expiry loop on virtual time: at start, then hourly, a failed run tried
again an hour later, and `health`'s view of it; nothing runs with keep_days 0."""

from __future__ import annotations

from typing import Any, cast

import anyio
import pytest
from trio.testing import MockClock

from broker.retention import DAY_MS, EVERY_S, Retention
from ledger.port.protocols import LedgerPort

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
