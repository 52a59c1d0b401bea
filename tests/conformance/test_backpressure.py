"""Backpressure that waits, through the port (ledger/port/protocols.py): a submitter
finding the queue of writes full waits in `admit` for room, then its write is taken."""

from __future__ import annotations

import anyio
import pytest

from ledger.port.protocols import Accepted, Committing, LedgerPort
from tests.conformance.conftest import SMALL_QUEUE
from tests.conformance.records import DM, inbound, tick

pytestmark = pytest.mark.anyio


async def test_with_room_admit_lets_the_write_through(port: LedgerPort) -> None:
    await port.admit()
    acc = await port.submit_inbound(inbound("m1"), DM, tick()).result()
    assert not acc.duplicate


async def test_a_full_queue_makes_a_submitter_wait_and_then_proceed(
    small_queue_port: LedgerPort,
) -> None:
    port = small_queue_port
    # Queued without a yield in between: the ledger cannot take any of them yet.
    earlier: list[Committing[Accepted]] = [
        port.submit_inbound(inbound(f"m{n}"), DM, tick()) for n in range(SMALL_QUEUE)
    ]
    assert port.writer_stats().queued == SMALL_QUEUE
    with anyio.fail_after(10):
        await port.admit()
        # It returned because room was made, so it waited for the ledger to take
        # some of the queue (it would have returned at once had there been room).
        assert port.writer_stats().queued < SMALL_QUEUE
        last = port.submit_inbound(inbound("late"), DM, tick())
        accepted = [await p.result() for p in [*earlier, last]]
    assert [a.msg_id for a in accepted] == [f"m{n}" for n in range(SMALL_QUEUE)] + ["late"]
    assert [a.seq for a in accepted] == sorted(a.seq for a in accepted)
    assert [i.id for i in await port.open_items(accepted[0].session)] == [a.item for a in accepted]


async def test_has_room_says_whether_admit_would_return_at_once(
    small_queue_port: LedgerPort,
) -> None:
    port = small_queue_port
    assert port.has_room()
    earlier = [port.submit_inbound(inbound(f"m{n}"), DM, tick()) for n in range(SMALL_QUEUE)]
    assert not port.has_room()  # full: a submitter that cannot wait awaits `admit` first
    with anyio.fail_after(10):
        await port.admit()
        assert port.has_room()  # room came: what `admit` waited for
        for pending in earlier:
            await pending.result()
    assert port.has_room()
