"""Timers on the Temporal runtime: each live timer is a Temporal timer workflow
(broker/runtime/temporal/timers.py), not the node's wheel; it fires into its
session's workflow, survives the node, and a cancel ends it."""

from __future__ import annotations

import itertools
import time
import uuid

import anyio
import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from broker.runtime.temporal.devserver import DevServer
from broker.runtime.temporal.timer_workflow import (
    FIRE_TIMER,
    MIN_WAIT_MS,
    Fired,
    TimerRun,
    TimerWorkflow,
    workflow_id,
)
from tests.conftest import DaemonFactory
from tests.integration.test_timers import op, rows, until
from tests.temporal_runtime import runtime_config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.temporal,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),  # the Temporal SDK is asyncio's
]


async def status_of(server: DevServer, timer: str) -> WorkflowExecutionStatus | None:
    """The timer workflow's status; None while the node has not started it yet."""
    client = await Client.connect(server.address)
    try:
        return (await client.get_workflow_handle(workflow_id(timer)).describe()).status
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        return None


async def until_status(
    server: DevServer, timer: str, wanted: WorkflowExecutionStatus, limit_s: float = 10
) -> None:
    with anyio.fail_after(limit_s):
        while await status_of(server, timer) != wanted:  # noqa: ASYNC110 - Temporal's state
            await anyio.sleep(0.05)


async def test_a_recurring_timer_fires_from_its_workflow_and_a_cancel_ends_it(
    temporal_server: DevServer, make_daemon: DaemonFactory
) -> None:
    d = make_daemon({"runtime": runtime_config(temporal_server.address)})
    added = await op(d, "timer.add", session="system:beat", text="beat", in_s=0.2, every_s=1)
    timer = added["timer"]
    await until_status(temporal_server, timer, WorkflowExecutionStatus.RUNNING)
    await until(
        d,
        "SELECT 1 FROM turns WHERE session_label = 'system:beat' AND status = 'completed'"
        " GROUP BY session_label HAVING count(*) >= 2",
    )
    fired = rows(d, "SELECT n, due_at FROM timer_firings ORDER BY n")
    assert [n for n, _ in fired] == list(range(1, len(fired) + 1))
    assert all((due - added["next_at"]) % 1000 == 0 for _, due in fired)  # on its grid
    await op(d, "timer.cancel", timer=timer)
    await until_status(temporal_server, timer, WorkflowExecutionStatus.CANCELED)
    assert await op(d, "timer.list") == []  # and the ledger fires only live timers


async def test_a_one_shot_timer_s_workflow_completes_after_its_firing(
    temporal_server: DevServer, make_daemon: DaemonFactory
) -> None:
    d = make_daemon({"runtime": runtime_config(temporal_server.address)})
    timer = (await op(d, "timer.add", session="system:once", text="once", in_s=0.2))["timer"]
    await until_status(temporal_server, timer, WorkflowExecutionStatus.COMPLETED)
    assert rows(d, "SELECT msg_id FROM timer_firings") == [(f"timer:{timer}:1",)]
    await until(d, "SELECT 1 FROM turns WHERE session_label = 'system:once'")
    assert await op(d, "timer.list") == []


async def test_a_timer_due_while_its_node_is_down_fires_once_after_it_is_back(
    temporal_server: DevServer, make_daemon: DaemonFactory
) -> None:
    """The sleep is Temporal's: the node killed and restarted later finds the
    firing waiting as a workflow task, and fires it once."""
    d = make_daemon({"runtime": runtime_config(temporal_server.address)})
    # Due well after the kill: from the add to the kill took up to 0.25 s on a busy
    # machine, and a timer due sooner could fire before the kill, not after the restart.
    added = await op(d, "timer.add", session="system:late", text="late", in_s=1.5)
    await until_status(temporal_server, added["timer"], WorkflowExecutionStatus.RUNNING)
    d.kill()
    # Its due time passes with no node.
    await anyio.sleep(max(0.0, added["next_at"] / 1000 + 0.1 - time.time()))
    back_ms = time.time() * 1000
    d.start()
    (fired,) = await until(d, "SELECT n, fired_at FROM timer_firings")
    assert fired[0] == 1 and fired[1] >= back_ms
    await until_status(temporal_server, added["timer"], WorkflowExecutionStatus.COMPLETED)
    assert len(rows(d, "SELECT n FROM timer_firings")) == 1


async def test_a_node_clock_behind_the_workflow_s_is_asked_again_not_in_a_busy_loop(
    temporal_server: DevServer,
) -> None:
    """timer_workflow.py, with a fake firing activity that says "not yet"
    twice (a node whose clock is behind), then fires, then ends the timer."""
    answers = [Fired(0, 0), Fired(0, 0), Fired(1, 0), Fired(0, None)]
    asked: list[float] = []

    @activity.defn(name=FIRE_TIMER)
    async def fire_timer(timer: str) -> Fired:
        asked.append(time.monotonic())
        return answers[len(asked) - 1]

    client = await Client.connect(temporal_server.address)
    queue = f"tmr-{uuid.uuid4().hex[:10]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[TimerWorkflow],
        activities=[fire_timer],
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("broker")
        ),
    ):
        await client.execute_workflow(
            TimerWorkflow.run,
            TimerRun("tmr_fake", 0, 5.0),
            id=workflow_id(f"fake-{uuid.uuid4().hex[:8]}"),
            task_queue=queue,
        )
    assert len(asked) == 4
    gaps = [b - a for a, b in itertools.pairwise(asked)]
    # "Not yet" twice: each next ask waited at least MIN_WAIT_MS.
    assert min(gaps[:2]) >= MIN_WAIT_MS / 1000 * 0.9
