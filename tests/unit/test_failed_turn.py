"""What the Temporal runtime's `fail_items` runs (broker/runtime/temporal/failed_turn.py):
the session's actor, its engine replaced by one that fails at once. The turn is
committed failed with reason `runtime` and the failure's words, as a local turn whose
engine fails, and the node's engine is never called."""

from __future__ import annotations

import anyio
import pytest

from broker.mailbox.actor import SessionActor
from broker.runtime.temporal.failed_turn import REASON, failing_ports, failure_text
from tests.unit.test_actor import anyio_backend, item, ports_with

__all__ = ["anyio_backend"]  # the actor tests' virtual clock
pytestmark = pytest.mark.anyio


async def test_the_turn_is_committed_failed_and_the_engine_is_not_called() -> None:
    ports = ports_with()
    text = failure_text("TimeoutError")
    actor = SessionActor("dm:a", failing_ports(ports, text))
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        actor.post(item(1))
        await ports.retired.wait()
    (rec,) = ports.commits
    assert (rec.status, rec.reason, rec.error) == ("failed", REASON, text)
    assert rec.item_status == "done"  # consumed by this turn, not run again
    assert ports.engine.calls == []
    assert text == "the agent failed (TimeoutError)"  # a local crashed engine's words
