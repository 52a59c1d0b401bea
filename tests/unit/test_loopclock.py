"""`broker.loopclock.loop_clock`: anyio's clock, without the backend lookup per reading."""

from __future__ import annotations

import asyncio

import anyio
import pytest
from trio.testing import MockClock

from broker.loopclock import loop_clock

pytestmark = pytest.mark.anyio


async def test_the_loop_clock_reads_what_anyio_reads(anyio_backend: str) -> None:
    clock = loop_clock()
    before = anyio.current_time()
    reading = clock()
    after = anyio.current_time()
    assert before <= reading <= after
    await anyio.sleep(0.01)
    assert clock() - reading >= 0.01  # it runs: a callable, not a reading taken once


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_on_asyncio_the_loop_clock_is_the_loops_own_method() -> None:
    assert loop_clock() == asyncio.get_running_loop().time


@pytest.mark.parametrize(
    "anyio_backend", [pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}), id="trio")]
)
async def test_on_trio_the_loop_clock_follows_a_replaced_clock() -> None:
    """A test's own trio clock (MockClock) is what deadlines use: the loop clock reads it."""
    clock = loop_clock()
    start = clock()
    with anyio.move_on_after(3600):  # the autojump clock gets there without a real wait
        await anyio.sleep_forever()
    assert clock() - start >= 3600
