"""The registry's timers on virtual time (trio's MockClock): the sweep that times out
overdue workers runs every quarter of `workers.timeout_s` (at most every 5 s), and
hands what it timed out to the actors."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest
from trio.testing import MockClock

from broker.config import Settings
from broker.deliveries import Deliveries
from broker.engines.echo import EchoEngine
from broker.mailbox import registry
from broker.mailbox.registry import Mailboxes
from broker.mailbox.restarts import stopped_by_storage
from broker.router import Router
from ledger.port.errors import LedgerWriteFailed, StorageFailed
from ledger.port.protocols import LedgerPort
from ledger.port.records import ItemInfo

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

    writer_died = None  # the writer runs

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


def unreachable() -> sqlite3.OperationalError:
    """What a read raises while PostgreSQL restarts (ledger/postgres/connection.py)."""
    exc = sqlite3.OperationalError("PostgreSQL unreachable: connection refused")
    exc.sqlite_errorcode = sqlite3.SQLITE_IOERR
    return exc


def mailboxes() -> Mailboxes:
    return Mailboxes(
        Settings(),
        cast(LedgerPort, FakeLedger(overdue_at=-1.0)),
        EchoEngine(),
        Router((), frozenset()),
        cast(Deliveries, SimpleNamespace()),
    )


def failing_actor(starts: list[float], failure: Callable[[float], Exception | None]) -> type:
    """An actor class whose runs note their (virtual) start in `starts` and raise
    `failure(start)` unless that is None."""

    class FailingActor:
        def __init__(self, label: str, ports: Any, draining: bool) -> None:
            self.label = label

        def post(self, event: Any) -> None:
            pass

        async def run(self, backlog: list[ItemInfo] | None) -> None:
            starts.append(anyio.current_time())
            error = failure(starts[-1])
            if error is not None:
                raise error

    return FailingActor


async def test_actors_stopped_by_a_ledger_outage_start_again_until_it_is_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ledger cannot be read for a minute (virtual): the session's actor fails at
    each start, far more often than MAX_ACTOR_RESTARTS, and runs once it is back. It
    used to be given up after 6.2 s of back-offs, its acked items never run."""
    outage_s = 60.0
    starts: list[float] = []
    during_the_outage = failing_actor(starts, lambda t: unreachable() if t < outage_s else None)
    monkeypatch.setattr(registry, "SessionActor", during_the_outage)
    boxes = mailboxes()
    async with anyio.create_task_group() as tg:
        await tg.start(boxes.run)
        boxes.post(result(1))
        await anyio.sleep(outage_s / 2)
        assert boxes.storage_stopped("dm:parent")  # what `health` says of its items
        await anyio.sleep(outage_s)
        tg.cancel_scope.cancel()
    assert not boxes.storage_stopped("dm:parent")
    assert len(starts) > registry.MAX_ACTOR_RESTARTS + 1 and starts[-1] >= outage_s
    assert starts[-1] - outage_s <= 5.0  # back-offs stay bounded: it starts soon after
    assert boxes.failures_of("dm:parent") == 0  # not the session's fault


async def test_an_actor_that_fails_on_its_own_is_given_up_after_its_restarts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    starts: list[float] = []
    broken = failing_actor(starts, lambda t: ValueError("a damaged queue override"))
    monkeypatch.setattr(registry, "SessionActor", broken)
    boxes = mailboxes()
    long_after_s = 60.0  # virtual, as every wait here: past all the back-offs
    async with anyio.create_task_group() as tg:
        await tg.start(boxes.run)
        boxes.post(result(1))
        await anyio.sleep(long_after_s)
        tg.cancel_scope.cancel()
    assert len(starts) == registry.MAX_ACTOR_RESTARTS + 1
    assert starts[-1] == pytest.approx(sum(0.1 * 2**n for n in range(1, 6)))  # 6.2 s
    assert boxes.failures_of("dm:parent") == registry.MAX_ACTOR_RESTARTS + 1


def test_a_group_is_the_storages_failure_only_when_all_of_it_is() -> None:
    assert stopped_by_storage(unreachable())
    assert stopped_by_storage(StorageFailed("disk full"))
    assert stopped_by_storage(ExceptionGroup("turn", [unreachable(), StorageFailed("x")]))
    assert not stopped_by_storage(ExceptionGroup("turn", [unreachable(), ValueError("bug")]))
    assert not stopped_by_storage(sqlite3.OperationalError("no such column: x"))
    assert not stopped_by_storage(LedgerWriteFailed("a job's own failure"))
