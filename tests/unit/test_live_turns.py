"""The turns running on a node and the workflow's news pushed to them
(broker/runtime/temporal/live_turns.py)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from broker.runtime.temporal.control import Control
from broker.runtime.temporal.live_turns import LiveTurns

pytestmark = pytest.mark.anyio


def news(abort: str | None = None, steer: int = 0) -> Control:
    return Control(abort, [[f"i{n}"] for n in range(steer)])


async def test_a_push_wakes_the_running_turn_and_is_taken_once() -> None:
    live = LiveTurns()
    with live.running("s", 3) as turn:
        assert live.push("s", 3, news(steer=1))
        assert turn.wake.is_set()
        taken = turn.take()
        assert taken is not None and [r[0] for r in taken.steer] == ["i0"]
        assert not turn.wake.is_set()  # the next wait starts afresh
        assert turn.take() is None


async def test_the_latest_push_replaces_the_earlier_and_is_kept_for_the_abort() -> None:
    live = LiveTurns()
    with live.running("s", 1) as turn:
        live.push("s", 1, news(steer=1))
        live.push("s", 1, news(abort="interrupt", steer=2))
        taken = turn.take()
        assert taken is not None and taken.abort == "interrupt" and len(taken.steer) == 2
        assert turn.latest is taken  # its reason, when the cancellation comes


async def test_a_push_for_another_turn_or_a_turn_not_here_misses() -> None:
    live = LiveTurns()
    assert not live.push("s", 1, news(abort="interrupt"))  # runs on another node
    with live.running("s", 2) as turn:
        assert not live.push("s", 1, news(abort="interrupt"))  # an earlier turn's news
        assert not live.push("t", 2, news(abort="interrupt"))
        assert not turn.wake.is_set()
    assert not live.push("s", 2, news(abort="interrupt"))  # ended


async def test_a_wait_on_the_wake_returns_at_the_push() -> None:
    live = LiveTurns()
    with live.running("s", 1) as turn:
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn.wake.wait)
            await anyio.lowlevel.checkpoint()
            live.push("s", 1, news(steer=1))
        assert turn.take() is not None
