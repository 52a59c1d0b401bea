"""A node keeps a session's context between the turns it runs
(broker/mailbox/warm_threads.py); a turn run on another node meanwhile moves the
head, and the next turn here loads the thread again rather than use what it kept."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from tests.harness import DaemonProcess
from tests.integration.cluster.conftest import ClusterFactory
from tests.integration.wire import Adapter, turns, uniq

pytestmark = pytest.mark.anyio
RUNNING = WorkflowExecutionStatus.RUNNING
QUICK = {"engine": {"chunks": 1}, "queue": {"debounce_ms": 0, "idle_stop_s": 0.1}}


def ran_on(node: DaemonProcess, msg_id: str) -> bool:
    lines = (orjson.loads(line) for line in node.log_lines() if line.startswith("{"))
    return any(e.get("event") == "turn completed" and msg_id in e.get("msg_ids", ()) for e in lines)


async def answered(node: DaemonProcess, session: str, count: int) -> list[dict[str, Any]]:
    with anyio.fail_after(20):
        while True:
            done = [t for t in turns(node, session) if t["status"] == "completed"]
            if len(done) >= count:
                return done
            await anyio.sleep(0.05)


async def logged(a: DaemonProcess, b: DaemonProcess, msg_id: str) -> None:
    """A node logged the turn of `msg_id` (its log line follows the commit)."""
    with anyio.fail_after(5):
        while True:
            if ran_on(a, msg_id) or ran_on(b, msg_id):
                return
            await anyio.sleep(0.05)


async def run_ended(client: Client, session: str) -> None:
    """The session's workflow run ended (quiet for idle_stop_s)."""
    with anyio.fail_after(10):
        while True:
            if (await client.get_workflow_handle(session).describe()).status != RUNNING:
                return
            await anyio.sleep(0.05)


async def test_a_turn_after_one_on_another_node_sees_that_turn(
    make_cluster: ClusterFactory,
) -> None:
    # Each node its own task queue: a session's run takes the queue of the node whose
    # message started it, so once its run ended (idle_stop_s) the next message picks
    # the node.
    cluster = make_cluster(
        2,
        QUICK,
        per_node=[{"runtime": {"task_queue": uniq("qa")}}, {"runtime": {"task_queue": uniq("qb")}}],
    )
    a, b = cluster.nodes
    channel, sender = uniq("chat"), uniq("u")
    long_text = " ".join(f"word{n}" for n in range(80))
    plan = [(a, "one"), (a, "two"), (b, long_text), (a, "three")]
    client = await Client.connect(a.config["runtime"]["address"])
    async with await Adapter.connect(a, channel) as on_a, await Adapter.connect(b, channel) as on_b:
        session = ""
        for n, (node, text) in enumerate(plan, start=1):
            msg = uniq("m")
            ack = await (on_a if node is a else on_b).send_inbound(msg, text, sender)
            session = ack["session"]
            done = await answered(a, session, n)
            await logged(a, b, msg)
            assert ran_on(node, msg), f"turn {n} was meant to run on {node.config['node_id']}"
            await run_ended(client, session)  # the next message may start one elsewhere
    prompts = [int(t["prompt_tokens"]) for t in done]
    # Turn 4 ran on node a, which kept its context at turn 2's head: had it used that,
    # node b's long turn 3 would be missing from its prompt.
    assert prompts[3] >= prompts[2] + 1, prompts
    assert prompts[3] > prompts[1] + 80, prompts
