"""Two attempts of one turn never run its engine at once
(broker/runtime/temporal/session_lease.py), on a real ledger: a retry waits for the
lease of a silent attempt to lapse, and the silent attempt, whose renewals no longer
get through (a starved node), stops its engine before that; an attempt whose renewal
is refused stops at once; a healthy long turn keeps its lease."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from broker.runtime.temporal.session_lease import BEAT_S, LeaseLost, SessionLease
from ledger.port.errors import LeaseFenced
from ledger.port.records import LeaseTaking
from ledger.sqlite.store import Ledger
from ledger.writer.jobs import Pending
from plumbing.ids import now_ms

pytestmark = pytest.mark.anyio
TTL_S = 2.0  # a node late by half of it loses its lease: wide enough for a loaded machine


class Starving:
    """The ledger as a node sees it whose writes stop getting through: its renewals hang
    once `starved` is set."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.starved = False

    async def take_lease(
        self, session: str, holder: str, now: int | None, ttl_ms: int
    ) -> LeaseTaking:
        return await self.ledger.take_lease(session, holder, now, ttl_ms)

    async def renew_lease(
        self, session: str, token: int, now: int | None, ttl_ms: int
    ) -> int | None:
        if self.starved:
            await anyio.sleep_forever()
        return await self.ledger.renew_lease(session, token, now, ttl_ms)

    def submit_release_lease(self, session: str, token: int) -> Pending[None]:
        return self.ledger.submit_release_lease(session, token)


class SlowWriter(Starving):
    """A busy node's ledger: every renewal waits `queued_s` in the writer's queue before
    it runs, and its answer comes `answered_s` after it ran."""

    def __init__(self, ledger: Ledger, queued_s: float, answered_s: float = 0.0) -> None:
        super().__init__(ledger)
        self.queued_s, self.answered_s = queued_s, answered_s

    async def take_lease(
        self, session: str, holder: str, now: int | None, ttl_ms: int
    ) -> LeaseTaking:
        await anyio.sleep(self.queued_s)
        taking = await self.ledger.take_lease(session, holder, now, ttl_ms)
        await anyio.sleep(self.answered_s)
        return taking

    async def renew_lease(
        self, session: str, token: int, now: int | None, ttl_ms: int
    ) -> int | None:
        await anyio.sleep(self.queued_s)
        held = await self.ledger.renew_lease(session, token, now, ttl_ms)
        await anyio.sleep(self.answered_s)
        return held


class Engine:
    """Records who ran when, and fails at once if two calls ever overlap."""

    def __init__(self) -> None:
        self.running: str | None = None
        self.log: list[tuple[str, str, float]] = []
        self.started = anyio.Event()

    async def call(self, who: str, seconds: float) -> str:
        assert self.running is None, f"{who} started while {self.running} runs"
        self.running = who
        self.log.append((who, "start", anyio.current_time()))
        self.started.set()
        try:
            await anyio.sleep(seconds)
        finally:
            self.log.append((who, "end", anyio.current_time()))
            self.running = None
        return f"answer of {who}"


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[Ledger]:
    async with Ledger.open(tmp_path / "ledger.db", writer="thread", check_s=0) as opened:
        yield opened


async def test_a_retry_waits_until_the_starved_attempt_stopped_its_engine(ledger: Ledger) -> None:
    engine, starving = Engine(), Starving(ledger)
    beats: list[float] = []
    first = SessionLease(starving, "s1", "a/turn#1", TTL_S, lambda: None)
    second = SessionLease(ledger, "s1", "b/turn#2", TTL_S, lambda: beats.append(0))
    outcome: dict[str, object] = {}

    async def attempt_one() -> None:
        try:
            outcome["one"] = await first.run(lambda: engine.call("one", 30))
        except LeaseLost:
            outcome["one"] = "lost"

    async def attempt_two() -> None:
        outcome["two"] = await second.run(lambda: engine.call("two", 0.05))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(attempt_one)
            await engine.started.wait()
            starving.starved = True  # its renewals hang from now on
            tg.start_soon(attempt_two)  # Temporal's retry, elsewhere

    assert outcome == {"one": "lost", "two": "answer of two"}
    (one_end,) = [t for who, what, t in engine.log if (who, what) == ("one", "end")]
    (two_start,) = [t for who, what, t in engine.log if (who, what) == ("two", "start")]
    assert one_end <= two_start
    assert [who for who, what, _ in engine.log if what == "start"] == ["one", "two"]
    assert beats, "the waiting attempt heartbeats"
    assert second.token is not None and first.token is not None
    assert second.token > first.token


async def test_an_attempt_whose_renewal_is_refused_stops_at_once(ledger: Ledger) -> None:
    engine = Engine()
    lease = SessionLease(ledger, "s1", "a/turn#1", TTL_S, lambda: None)
    taken_over = anyio.Event()

    async def other_clock_takes_it() -> None:  # a node whose clock runs a TTL ahead
        await engine.started.wait()
        later = now_ms() + round(TTL_S * 1000) + 1
        assert (await ledger.take_lease("s1", "b/turn#2", later, 10_000)).taken
        taken_over.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(other_clock_takes_it)
            with pytest.raises(LeaseLost):
                await lease.run(lambda: engine.call("one", 30))
            stopped = anyio.current_time()
    assert taken_over.is_set()
    (start,) = [t for who, what, t in engine.log if what == "start"]
    assert stopped - start < TTL_S  # the first renewal (a quarter TTL in) was refused
    assert engine.running is None


async def test_an_attempt_whose_write_is_fenced_is_cut_off(ledger: Ledger) -> None:
    """A write nobody awaits, submitted after another attempt took the lease, changes
    nothing and cuts its attempt off (ledger/port/fencing.py), renewals or not."""
    engine, starving = Engine(), Starving(ledger)
    lease = SessionLease(starving, "s1", "a/turn#1", TTL_S, lambda: None)
    written: list[Pending[None]] = []

    async def turn() -> str:
        starving.starved = True  # only the write can tell it the lease is gone
        later = now_ms() + round(TTL_S * 1000) + 1  # a node whose clock runs a TTL ahead
        assert (await ledger.take_lease("s1", "b/turn#2", later, 10_000)).taken
        written.append(ledger.submit_progress("t1", "s1", "half an answer", now_ms()))
        return await engine.call("one", 30)

    with anyio.fail_after(10):
        with pytest.raises(LeaseLost):
            await lease.run(turn)
        await written[0].wait()
    assert lease._why == "a write was fenced"  # its renewals never came back
    with pytest.raises(LeaseFenced):
        written[0].get()
    assert engine.running is None


async def test_a_long_healthy_turn_keeps_its_lease_and_the_next_waits_for_it(
    ledger: Ledger,
) -> None:
    engine = Engine()
    first = SessionLease(ledger, "s1", "a/turn#1", TTL_S, lambda: None)
    second = SessionLease(ledger, "s1", "b/turn#2", TTL_S, lambda: None)
    answers: list[str] = []

    async def two_after_start() -> None:
        await engine.started.wait()
        answers.append(await second.run(lambda: engine.call("two", 0.01)))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(two_after_start)
            answers.append(await first.run(lambda: engine.call("one", TTL_S * 2)))
    assert answers == ["answer of one", "answer of two"]
    assert [(who, what) for who, what, _ in engine.log] == [
        ("one", "start"),
        ("one", "end"),
        ("two", "start"),
        ("two", "end"),
    ]
    released = (await ledger.take_lease("s1", "c", now_ms(), 1000)).taken
    assert released, "each attempt releases its lease when its turn ends"


async def test_an_error_of_the_turn_is_raised_as_it_is_and_the_lease_released(
    ledger: Ledger,
) -> None:
    lease = SessionLease(ledger, "s1", "a/turn#1", TTL_S, lambda: None)

    async def fails() -> None:
        raise ValueError("the turn's own error")

    with pytest.raises(ValueError, match="own error"):
        await lease.run(fails)
    assert (await ledger.take_lease("s1", "b", now_ms(), 1000)).taken


async def test_a_writer_slower_than_the_renewals_keeps_the_lease(ledger: Ledger) -> None:
    """Renewals do not wait for each other: each is answered 0.27 TTL after it ran (longer
    than the quarter TTL between them), and a turn of 2 TTL keeps its lease."""
    engine = Engine()
    slow = SlowWriter(ledger, queued_s=0.0, answered_s=0.27 * TTL_S)
    lease = SessionLease(slow, "s1", "a/turn#1", TTL_S, lambda: None)
    with anyio.fail_after(10):
        assert await lease.run(lambda: engine.call("one", TTL_S * 2)) == "answer of one"
    assert [what for _who, what, _t in engine.log] == ["start", "end"]


async def test_writes_that_wait_long_in_the_writers_queue_keep_the_lease(ledger: Ledger) -> None:
    """A busy writer's queue: the taking and every renewal wait 0.45 TTL before they run
    (counted from their sending, the taking's wait and the first renewal's would take
    0.9 TTL of the lease's 0.75), and a turn of 2 TTL keeps its lease: a lease counts
    from when its write ran."""
    engine = Engine()
    lease = SessionLease(SlowWriter(ledger, 0.45 * TTL_S), "s1", "a/turn#1", TTL_S, lambda: None)
    with anyio.fail_after(10):
        assert await lease.run(lambda: engine.call("one", TTL_S * 2)) == "answer of one"
    assert [what for _who, what, _t in engine.log] == ["start", "end"]


class Counting(Starving):
    """Records when each renewal was sent."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger)
        self.renewals: list[float] = []

    async def renew_lease(
        self, session: str, token: int, now: int | None, ttl_ms: int
    ) -> int | None:
        self.renewals.append(time.monotonic())
        return await self.ledger.renew_lease(session, token, now, ttl_ms)


async def test_a_paused_holder_resumed_past_its_time_sends_no_renewal_and_lets_go(
    ledger: Ledger,
) -> None:
    """A node paused (its event loop stopped: SIGSTOP, a VM's pause) past its lease's
    time, once resumed, cuts its turn off without renewing the lease first: a renewal
    then would make the next attempt wait a whole time-to-live for nothing."""
    counting = Counting(ledger)
    lease = SessionLease(counting, "s1", "a/turn#1", TTL_S, lambda: None)
    resumed: list[float] = []

    async def paused_turn() -> str:
        await anyio.sleep(TTL_S / 2)  # a renewal or two in its normal course
        time.sleep(TTL_S * 1.5)  # noqa: ASYNC251  # the whole loop stopped, as when paused
        resumed.append(time.monotonic())
        await anyio.sleep(TTL_S * 4)
        return "finished"

    with anyio.fail_after(10), pytest.raises(LeaseLost):
        await lease.run(paused_turn)
    assert counting.renewals, "renewed before the pause"
    assert all(sent < resumed[0] for sent in counting.renewals), (counting.renewals, resumed)


async def test_a_holder_heartbeats_from_its_taking_to_its_end(ledger: Ledger) -> None:
    """A turn's steps before its engine call wait on a busy node's ledger: the attempt
    that holds its lease heartbeats all along, and not after its end."""
    beats: list[float] = []
    lease = SessionLease(ledger, "s1", "a/turn#1", TTL_S, lambda: beats.append(0))
    with anyio.fail_after(10):
        await lease.run(lambda: anyio.sleep(10 * BEAT_S))  # a wait of ten beats
        counted = len(beats)
        await anyio.sleep(3 * BEAT_S)
    assert counted >= 2
    assert len(beats) == counted
