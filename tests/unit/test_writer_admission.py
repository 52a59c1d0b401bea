"""Backpressure that waits (ledger/writer/admission.py): a full
queue makes a submitter wait for room, for a bounded time, instead of refusing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import anyio.abc
import pytest

from ledger.port.errors import WriterClosed, WriterOverloaded
from ledger.writer.group_commit import LedgerWriter
from ledger.writer.jobs import Pending
from tests.suspensions import counting_suspensions
from tests.unit.test_writer_pipeline import GatedLink, _echo

pytestmark = pytest.mark.anyio
BOUND = 3


async def fill(writer: LedgerWriter, link: GatedLink) -> list[Pending[int]]:
    """Two batches held in the link (its depth), then the queue filled to its bound."""
    pending = []
    for n in range(2):
        pending.append(writer.submit(_echo, n))
        await anyio.wait_all_tasks_blocked()
    assert link.sizes == [1, 1]
    pending += [writer.submit(_echo, n) for n in range(2, 2 + BOUND)]
    assert writer.queued == BOUND
    return pending


async def admitted_submit(writer: LedgerWriter, wait_s: float, log: list[str]) -> None:
    try:
        await writer.admit(wait_s)
    except (WriterOverloaded, WriterClosed) as exc:
        log.append(type(exc).__name__)
        return
    log.append("admitted")
    assert await writer.submit(_echo, 99).result() == 99
    log.append("committed")


@pytest.fixture
async def held() -> AsyncIterator[tuple[LedgerWriter, GatedLink, anyio.abc.TaskGroup]]:
    link = GatedLink()
    writer = LedgerWriter(link, max_queue=BOUND)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        try:
            yield writer, link, tg
        finally:
            link.open_up()  # never leave the writer's shutdown waiting on the gate
            tg.cancel_scope.cancel()


async def test_with_room_admit_returns_without_a_loop_turn() -> None:
    writer = LedgerWriter(GatedLink(), max_queue=BOUND)
    suspensions = [0]
    await counting_suspensions(writer.admit(5), suspensions)
    assert suspensions == [0]


async def test_a_full_queue_makes_the_submitter_wait_until_a_batch_leaves_it(
    held: tuple[LedgerWriter, GatedLink, anyio.abc.TaskGroup],
) -> None:
    writer, link, tg = held
    earlier = await fill(writer, link)
    log: list[str] = []
    tg.start_soon(admitted_submit, writer, 5.0, log)
    await anyio.wait_all_tasks_blocked()
    assert log == [] and writer.queued == BOUND  # waiting, not refused
    link.commits.release()  # the first batch commits; the queue moves into the link
    with anyio.fail_after(5):
        while not log:
            await anyio.wait_all_tasks_blocked()
    assert log == ["admitted"]
    link.open_up()
    with anyio.fail_after(5):
        assert [await p.result() for p in earlier] == list(range(2 + BOUND))
        while log != ["admitted", "committed"]:
            await anyio.wait_all_tasks_blocked()


async def test_past_its_wait_admit_is_overloaded_and_queues_nothing(
    held: tuple[LedgerWriter, GatedLink, anyio.abc.TaskGroup],
) -> None:
    writer, link, _ = held
    await fill(writer, link)
    with anyio.fail_after(5), pytest.raises(WriterOverloaded, match="stayed full"):
        await writer.admit(0.05)
    assert writer.queued == BOUND


async def test_a_waiting_submitter_learns_that_the_writer_stopped() -> None:
    link = GatedLink()
    writer = LedgerWriter(link, max_queue=BOUND)
    log: list[str] = []
    told = anyio.Event()

    async def submit_and_tell() -> None:
        await admitted_submit(writer, 5.0, log)
        told.set()

    async def open_once_told() -> None:
        with anyio.fail_after(5):
            await told.wait()
        link.open_up()  # the shutdown finishes what was queued (writer)

    async with anyio.create_task_group() as outer, anyio.create_task_group() as tg:
        await tg.start(writer.run)
        await fill(writer, link)
        outer.start_soon(submit_and_tell)
        await anyio.wait_all_tasks_blocked()
        outer.start_soon(open_once_told)
        tg.cancel_scope.cancel()  # the writer stops, its queue still full
    assert log == ["WriterClosed"]


async def test_a_submit_is_never_refused_for_a_full_queue_only_admit_waits() -> None:
    writer = LedgerWriter(GatedLink(), max_queue=BOUND)
    for n in range(3 * BOUND):  # past the bound: room is `admit`'s business
        writer.submit(_echo, n)
    assert writer.queued == 3 * BOUND and not writer.has_room()
