"""An engine that fails every turn ends each turn the same way on both runtimes:
the turn recorded failed with its reason, the person told once, the item consumed
once, and the session free for its next message.

Parametrized over the local runtime and the Temporal one (marked `temporal`),
where the turn is an activity that must not be handed again and again.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from broker.runtime.temporal.devserver import DevServer
from tests.conftest import DaemonFactory
from tests.integration.wire import Adapter, items, turns, uniq, wait_until
from tests.temporal_runtime import runtime_config

pytestmark = pytest.mark.anyio
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

# A subprocess engine whose program dies at once on every turn.
CRASHING: dict[str, Any] = {
    "engine": {"kind": "subprocess", "command": [sys.executable, "-c", "raise SystemExit(3)"]},
    "queue": {"debounce_ms": 0},
}


@pytest.fixture(params=["local", pytest.param("temporal", marks=pytest.mark.temporal)])
def runtime(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "local":
        return {}
    server: DevServer = request.getfixturevalue("temporal_server")
    return {"runtime": runtime_config(server.address)}


@asyncio_only
async def test_a_failing_engine_fails_each_turn_once_and_the_session_goes_on(
    make_daemon: DaemonFactory, runtime: dict[str, Any]
) -> None:
    d = make_daemon({**CRASHING, **runtime})
    sender = uniq("+")
    first, second = uniq("m"), uniq("m")
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(first, "hello", sender))["session"]
        told = await a.deliver(session=session)
        await a.send_inbound(second, "again", sender)
        told_again = await a.deliver(session=session)
        # Nothing more comes: each failed turn told the person once.
        await a.read_for(0.3)
        assert [f for f in a.kept() if f.get("type") == "deliver"] == []
    assert told["status"] == "failed" and told["in_reply_to"] == [first]
    assert told_again["status"] == "failed" and told_again["in_reply_to"] == [second]
    one, two = turns(d, session)
    assert (one["status"], one["inputs"]) == ("failed", [first])
    assert (two["status"], two["inputs"]) == ("failed", [second])
    assert one["reason"] and one["error"] == told["text"]
    done = items(d, session)
    assert done[first] == ("done", None, one["id"])
    assert done[second] == ("done", None, two["id"])


@asyncio_only
@pytest.mark.temporal
@pytest.mark.slow
async def test_a_turn_activity_that_fails_every_attempt_is_failed_once_on_temporal(
    temporal_server: DevServer, make_daemon: DaemonFactory
) -> None:
    """workflow.py on a real node: every attempt of the turn's activity runs out
    of its time (a run started by the test with a 1 s turn bound, against an engine
    that takes 8 s); then `fail_items` records the turn failed (reason `runtime`),
    tells the person, consumes the item, and the session takes its next message."""
    from temporalio.client import Client

    from broker.runtime.temporal.session_records import SessionSpec
    from broker.runtime.temporal.workflow import SessionWorkflow

    runtime = runtime_config(temporal_server.address)
    slow = {"engine": {"chunks": 4, "delay_ms": 2000}, "queue": {"idle_stop_s": 0.3}}
    d = make_daemon({**slow, "runtime": runtime})
    client = await Client.connect(temporal_server.address)
    sender, stuck = uniq("+"), uniq("m")
    async with await Adapter.connect(d, uniq("t")) as a:
        # A command names the session without a turn; its run ends when quiet.
        session = (await a.send_inbound(uniq("m"), "/status", sender))["session"]
        await a.deliver(session=session)
        handle = client.get_workflow_handle(session)

        async def ended() -> bool:
            status = (await handle.describe()).status
            return status is not None and status.name == "COMPLETED"

        await wait_until(ended, "the session's first run to end")
        spec = SessionSpec(session, 30.0, False, turn_timeout_s=1.0, heartbeat_timeout_s=2.0)
        await client.start_workflow(
            SessionWorkflow.run, spec, id=session, task_queue=runtime["task_queue"]
        )
        await a.send_inbound(stuck, "abcd", sender)
        told = await a.deliver(session=session, status="failed", within=60)
    assert told["in_reply_to"] == [stuck]
    assert told["text"] == "the agent failed (TimeoutError)"
    failed = [t for t in turns(d, session) if t["status"] == "failed"]
    assert [(t["reason"], t["inputs"]) for t in failed] == [("runtime", [stuck])]
    assert items(d, session)[stuck] == ("done", None, failed[0]["id"])
