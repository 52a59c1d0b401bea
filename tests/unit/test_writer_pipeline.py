"""LedgerWriter over a scripted two-deep link: batching and hand-over, without SQLite."""

from __future__ import annotations

import contextlib
import random
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from ledger.writer.group_commit import LedgerWriter
from ledger.writer.jobs import JobSpec, Outcome, Pending
from tests.suspensions import counting_suspensions

pytestmark = pytest.mark.anyio


def _echo(conn: Any, value: int) -> int:
    return value


@contextlib.asynccontextmanager
async def running(writer: LedgerWriter) -> AsyncIterator[None]:
    """The writer runs for the block; leaving it cancels the writer, which then
    finishes what was queued (writer)."""
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        yield
        tg.cancel_scope.cancel()


class ScriptedLink:
    """A `BatchLink` whose transactions take `commit_s` each, one at a time."""

    depth = 2

    def __init__(self, commit_s: float, send_s: float = 0.0) -> None:
        self.commit_s = commit_s
        self.send_s = send_s  # > 0: every send waits, as on a full socket
        self.sizes: list[int] = []
        self._handed: deque[list[JobSpec]] = deque()

    async def send(self, jobs: list[JobSpec]) -> None:
        assert len(self._handed) < self.depth, "handed over more batches than the link holds"
        self.sizes.append(len(jobs))
        self._handed.append(jobs)
        if self.send_s:
            with anyio.CancelScope(shield=True):  # all or nothing (BatchLink)
                await anyio.sleep(self.send_s)

    async def receive(self) -> list[Outcome]:
        await anyio.sleep(self.commit_s)
        jobs = self._handed.popleft()  # only now: a cancelled receive takes nothing
        return [self._run(job) for job in jobs]

    @staticmethod
    def _run(job: JobSpec) -> Outcome:
        try:
            return job.fn(None, *job.args, **job.kwargs), None
        except Exception as exc:  # the job fails alone (writer)
            return None, exc

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_every_job_goes_in_exactly_one_non_empty_batch(seed: int) -> None:
    rng = random.Random(seed)
    link = ScriptedLink(commit_s=0.002)
    writer = LedgerWriter(link)
    pendings: dict[int, Pending[int]] = {}
    total = 0

    async def submitter(base: int) -> None:
        nonlocal total
        for i in range(60):
            value = base + i
            pendings[value] = writer.submit(_echo, value)
            total += 1
            pause = rng.choice([0.0, 0.0, 0.0005, 0.003])
            if pause:
                await anyio.sleep(pause)

    async with running(writer):
        async with anyio.create_task_group() as senders:
            for n in range(8):
                senders.start_soon(submitter, n * 1000)
        with anyio.fail_after(10):
            results = {value: await p.result() for value, p in pendings.items()}
    assert results == {v: v for v in results} and len(results) == total == 480
    assert min(link.sizes) >= 1, f"an empty batch was handed over: {link.sizes}"
    assert sum(link.sizes) == total
    assert writer.commits == len(link.sizes)
    assert len(link.sizes) < total  # jobs that waited for room went together


async def test_cancelled_with_jobs_queued_every_job_still_resolves() -> None:
    link = ScriptedLink(commit_s=0.01)
    writer = LedgerWriter(link)
    async with running(writer):
        pending = [writer.submit(_echo, i) for i in range(5)]
        await anyio.lowlevel.checkpoint()  # the first batch is handed over
        pending += [writer.submit(_echo, i) for i in range(5, 300)]
    assert [p.get() for p in pending] == list(range(300))
    assert min(link.sizes) >= 1 and sum(link.sizes) == 300


async def test_a_caller_wakes_once_when_its_own_batch_commits() -> None:
    """A job queued behind a batch in flight waits for its own batch: the earlier
    batch's commit does not wake its caller (the actor awaiting a turn commit)."""
    link = ScriptedLink(commit_s=0.05)
    writer = LedgerWriter(link)
    async with running(writer):
        first = writer.submit(_echo, 1)
        with anyio.fail_after(5):
            while not link.sizes:  # until the first batch is handed over
                await anyio.lowlevel.checkpoint()
        second, third = writer.submit(_echo, 2), writer.submit(_echo, 3)
        suspensions = [0]
        with anyio.fail_after(5):
            assert await counting_suspensions(third.result(), suspensions) == 3
        assert first.get() == 1 and second.get() == 2
    assert link.sizes == [1, 2]
    assert suspensions == [1]


def _fail(conn: Any, value: int) -> int:
    raise ValueError(value)


async def test_settled_returns_once_every_job_submitted_before_it_is_resolved() -> None:
    link = ScriptedLink(commit_s=0.01)
    writer = LedgerWriter(link, lazy_s=60.0)
    async with running(writer):
        with anyio.fail_after(1):
            await writer.settled()  # nothing open: at once
        jobs = [writer.submit(_echo, i) for i in range(3)]
        await anyio.lowlevel.checkpoint()  # (asyncio: the first batch is handed over)
        jobs += [writer.submit(_echo, 3), writer.submit(_fail, 4)]
        lazy = writer.submit_lazy(_echo, 5)  # not waited for
        with anyio.fail_after(5):
            await writer.settled()  # does not raise the failed job's error
        assert all(p.done for p in jobs), [p.done for p in jobs]
        assert [p.get() for p in jobs[:4]] == [0, 1, 2, 3]
        with pytest.raises(ValueError, match="4"):
            jobs[4].get()
        with anyio.fail_after(1):
            await writer.settled()  # all resolved: at once again
    assert lazy.get() == 5


async def test_a_lazy_job_waits_for_company_and_joins_the_next_batch() -> None:
    link = ScriptedLink(commit_s=0.001)
    writer = LedgerWriter(link, lazy_s=5.0)  # long: only company can take it
    async with running(writer):
        lazy = writer.submit_lazy(_echo, 1)
        await anyio.sleep(0.05)
        assert link.sizes == [] and not lazy.done  # nothing went for it alone
        urgent = writer.submit(_echo, 2)
        with anyio.fail_after(5):
            assert await urgent.result() == 2
        assert lazy.get() == 1
        assert link.sizes == [2]  # one transaction for both


async def test_a_lazy_job_alone_goes_when_its_wait_is_over() -> None:
    link = ScriptedLink(commit_s=0.001)
    writer = LedgerWriter(link, lazy_s=0.05)
    async with running(writer):
        started = anyio.current_time()
        lazy = writer.submit_lazy(_echo, 7)
        with anyio.fail_after(5):
            assert await lazy.result() == 7
        assert anyio.current_time() - started >= 0.04
        assert link.sizes == [1]


async def test_lazy_jobs_still_commit_when_the_writer_is_cancelled() -> None:
    link = ScriptedLink(commit_s=0.001)
    writer = LedgerWriter(link, lazy_s=60.0)
    async with running(writer):
        lazy = [writer.submit_lazy(_echo, i) for i in range(3)]
        await anyio.lowlevel.checkpoint()
    assert [p.get() for p in lazy] == [0, 1, 2]
    assert link.sizes == [3]


@pytest.mark.parametrize("seed", [4, 5, 6, 7])
async def test_lazy_and_urgent_jobs_over_a_slow_link_all_commit(seed: int) -> None:
    """Sends that wait (a full socket) while lazy jobs are all that is left must
    not strand them: every job commits, in non-empty batches."""
    rng = random.Random(seed)
    link = ScriptedLink(commit_s=0.001, send_s=0.003)
    writer = LedgerWriter(link, lazy_s=0.01)
    pending = []

    async def submitter(base: int) -> None:
        for i in range(40):
            submit = writer.submit_lazy if rng.random() < 0.5 else writer.submit
            pending.append(submit(_echo, base + i))
            await anyio.sleep(rng.choice([0.0, 0.001, 0.004]))

    async with running(writer):
        async with anyio.create_task_group() as senders:
            for n in range(4):
                senders.start_soon(submitter, n * 1000)
        with anyio.fail_after(10):
            for p in pending:
                await p.result()
    assert sorted(p.get() for p in pending) == sorted(
        n * 1000 + i for n in range(4) for i in range(40)
    )
    assert min(link.sizes) >= 1 and sum(link.sizes) == len(pending)


class GatedLink:
    """A two-deep link whose commits and sends the test lets through by hand."""

    depth = 2

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self._handed: deque[list[JobSpec]] = deque()
        self.commits = anyio.Semaphore(0)  # one release per batch allowed to commit
        self.block_sends = False
        self.sends_released = anyio.Event()
        self.send_waiting = anyio.Event()
        self.open = False  # let everything through (the test's cleanup)

    async def send(self, jobs: list[JobSpec]) -> None:
        self.sizes.append(len(jobs))
        self._handed.append(jobs)
        if self.block_sends:
            self.send_waiting.set()
            with anyio.CancelScope(shield=True):  # all or nothing (BatchLink)
                await self.sends_released.wait()

    async def receive(self) -> list[Outcome]:
        if not self.open:
            await self.commits.acquire()
        jobs = self._handed.popleft()
        return [(job.fn(None, *job.args, **job.kwargs), None) for job in jobs]

    async def aclose(self) -> None:
        pass

    def open_up(self) -> None:
        self.open = True
        self.commits.release()
        self.sends_released.set()


async def test_a_lazy_job_left_alone_behind_a_waiting_send_still_goes() -> None:
    # (On asyncio the receiver hands the second batch over, as in the story below;
    # trio may run the sender first, which then waits in the send itself.)
    link = GatedLink()
    writer = LedgerWriter(link, lazy_s=0.01)
    async with running(writer):
        try:
            first = writer.submit(_echo, 1)
            await anyio.wait_all_tasks_blocked()  # handed over; its commit waits
            link.block_sends = True
            link.commits.release()  # the first batch commits...
            second = writer.submit(_echo, 2)  # ...and the receiver hands this one over
            with anyio.fail_after(5):
                await link.send_waiting.wait()  # a send that has to wait
            await anyio.wait_all_tasks_blocked()
            lazy = writer.submit_lazy(_echo, 3)  # all that is left, while the send waits
            await anyio.sleep(0.05)  # past lazy_s: the sender waits for the send to end
            link.block_sends = False
            link.sends_released.set()
            link.commits.release()
            link.commits.release()
            with anyio.fail_after(5):
                assert await lazy.result() == 3
            assert [first.get(), second.get()] == [1, 2]
            assert link.sizes == [1, 1, 1]
        finally:
            link.open_up()  # never leave the writer's shutdown waiting on the gate


async def test_a_job_submitted_last_ends_the_next_batch_ahead_of_what_does_not_fit() -> None:
    """A job that must be answered soon after it ran (a lease's renewal) goes at the end
    of the next batch, ahead of older jobs that batch has no room for."""
    link = ScriptedLink(commit_s=0.01)
    writer = LedgerWriter(link, max_batch=4, lazy_s=60.0)
    order: list[int] = []

    def _noted(conn: Any, value: int) -> int:
        order.append(value)
        return value

    async with running(writer):
        queued = [writer.submit(_noted, i) for i in range(10)]
        last = writer.submit_last(_noted, 100)
        with anyio.fail_after(5):
            assert await last.result() == 100
            assert [await p.result() for p in queued] == list(range(10))
        await writer.settled()
    # It ended the first batch, which had room for three of the ten queued before it.
    assert order == [0, 1, 2, 100, *range(3, 10)]
    assert link.sizes == [4, 4, 3]
