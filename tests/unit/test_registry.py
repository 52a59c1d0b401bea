"""The registry's timers on virtual time (trio's MockClock): the sweep that times out
overdue workers runs every quarter of `workers.timeout_s` (at most every 5 s), and
hands what it timed out to the actors."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest
from trio.testing import MockClock

from broker.config import Settings
from broker.deliveries import Deliveries
from broker.engines.echo import EchoEngine
from broker.mailbox.registry import Mailboxes
from broker.router import Router
from ledger.items import ItemInfo
from ledger.port import LedgerPort

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> Any:
    return ("trio", {"clock": MockClock(autojump_threshold=0)})


def result(n: int) -> ItemInfo:
    return ItemInfo(
        f"r{n}", n, "dm:parent", "worker", None, "queued", None, None,
        None, None, None, None, None, None, None, "timed out",
    )  # fmt: skip


class FakeLedger:
    """Nothing to recover; the sweep at `overdue_at` (virtual s) finds one worker late."""

    def __init__(self, overdue_at: float) -> None:
        self.overdue_at = overdue_at
        self.sweeps: list[float] = []

    async def recover_crashed(self, now: int, session: str | None = None) -> list[str]:
        return []  # nothing cut off by a crash

    async def sweep_worker_timeouts(self, now_ms: int) -> list[ItemInfo]:
        now = anyio.current_time()
        self.sweeps.append(now)
        return [result(len(self.sweeps))] if now == pytest.approx(self.overdue_at) else []

    async def open_items(self, session: str | None = None) -> list[ItemInfo]:
        return []


@pytest.mark.parametrize(("timeout_s", "every_s"), [(8.0, 2.0), (60.0, 5.0)])
async def test_overdue_workers_are_swept_every_quarter_of_their_timeout(
    timeout_s: float, every_s: float
) -> None:
    ledger = FakeLedger(overdue_at=3 * every_s)
    boxes = Mailboxes(
        Settings(workers={"timeout_s": timeout_s}),
        cast(LedgerPort, ledger),
        EchoEngine(),
        Router((), frozenset()),
        cast(Deliveries, SimpleNamespace()),
    )
    posted: list[ItemInfo] = []
    boxes.post = posted.append  # type: ignore[method-assign,assignment]
    with anyio.move_on_after(4 * every_s + 0.5):
        await boxes.run()
    assert ledger.sweeps == pytest.approx([every_s * n for n in range(1, 5)])
    assert [i.id for i in posted] == ["r3"]
