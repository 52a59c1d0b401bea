"""An activity that waits on its busy node heartbeats meanwhile
(broker/runtime/temporal/activities.py)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.temporal]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the Temporal SDK's


async def test_a_wait_longer_than_the_heartbeat_bound_is_not_taken_for_a_dead_node() -> None:
    from temporalio.testing import ActivityEnvironment

    from broker.runtime.temporal.activities import heartbeat_every

    beats: list[tuple[Any, ...]] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)

    async def commands_on_a_busy_node() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(heartbeat_every, 0.01)
            await anyio.sleep(0.2)  # a wait of 20 beats, as for the ledger's queue
            assert len(beats) >= 10
            tg.cancel_scope.cancel()

    await env.run(commands_on_a_busy_node)
    counted = len(beats)
    await anyio.sleep(0.05)
    assert len(beats) == counted  # and none after the activity
