"""LedgerWriter over a scripted two-deep link: batching and hand-over, without SQLite."""

from __future__ import annotations

import functools
import random
from collections import deque
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from ledger.writer import JobSpec, LedgerWriter, Outcome

pytestmark = pytest.mark.anyio


def _echo(conn: Any, value: int) -> int:
    return value


class ScriptedLink:
    """A `BatchLink` whose transactions take `commit_s` each, one at a time."""

    depth = 2

    def __init__(self, commit_s: float) -> None:
        self.commit_s = commit_s
        self.sizes: list[int] = []
        self._handed: deque[list[JobSpec]] = deque()

    async def send(self, jobs: list[JobSpec]) -> None:
        assert len(self._handed) < self.depth, "handed over more batches than the link holds"
        self.sizes.append(len(jobs))
        self._handed.append(jobs)

    async def receive(self) -> list[Outcome]:
        jobs = self._handed.popleft()
        await anyio.sleep(self.commit_s)
        return [(job.fn(None, *job.args, **job.kwargs), None) for job in jobs]

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_every_job_goes_in_exactly_one_non_empty_batch(seed: int) -> None:
    rng = random.Random(seed)
    link = ScriptedLink(commit_s=0.002)
    writer = LedgerWriter(link)
    results: dict[int, int] = {}
    all_done = anyio.Event()
    total = 0

    def record(value: int, committed: int) -> None:
        results[value] = committed
        if len(results) == 480:
            all_done.set()

    async def submitter(base: int) -> None:
        nonlocal total
        for i in range(60):
            value = base + i
            pending = writer.submit(_echo, value)
            total += 1
            pending.after_commit(functools.partial(record, value))
            pause = rng.choice([0.0, 0.0, 0.0005, 0.003])
            if pause:
                await anyio.sleep(pause)

    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        async with anyio.create_task_group() as senders:
            for n in range(8):
                senders.start_soon(submitter, n * 1000)
        with anyio.fail_after(10):
            await all_done.wait()
        tg.cancel_scope.cancel()
    assert results == {v: v for v in results} and len(results) == total == 480
    assert min(link.sizes) >= 1, f"an empty batch was handed over: {link.sizes}"
    assert sum(link.sizes) == total
    assert writer.commits == len(link.sizes)
    assert len(link.sizes) < total  # jobs that waited for room went together


async def test_cancelled_with_jobs_queued_every_job_still_resolves() -> None:
    link = ScriptedLink(commit_s=0.01)
    writer = LedgerWriter(link)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        pending = [writer.submit(_echo, i) for i in range(5)]
        await anyio.lowlevel.checkpoint()  # the first batch is handed over
        pending += [writer.submit(_echo, i) for i in range(5, 300)]
        tg.cancel_scope.cancel()
    assert [p.get() for p in pending] == list(range(300))
    assert min(link.sizes) >= 1 and sum(link.sizes) == 300
