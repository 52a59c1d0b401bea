"""Which attempts of a session's activity may act, and which failures are a node's
silence rather than the turn's own (broker/runtime/temporal/activities.py,
workflow.py): an attempt the server has given up writes nothing, and a turn whose
attempts ran out on silent nodes runs again."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from temporalio.activity import ActivityCancellationDetails
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    TimeoutError,
    TimeoutType,
)
from temporalio.testing import ActivityEnvironment

from broker.runtime.temporal.activities import refuse_stale, superseded
from broker.runtime.temporal.session_records import LEASE_LOST, NODE_STOPPING, STALE_ATTEMPT
from broker.runtime.temporal.workflow import silenced

pytestmark = [pytest.mark.anyio, pytest.mark.temporal]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the Temporal SDK's


def started(ago_s: float) -> ActivityEnvironment:
    env = ActivityEnvironment()
    at = datetime.now(UTC) - timedelta(seconds=ago_s)
    env.info = dataclasses.replace(env.info, started_time=at)
    return env


async def test_an_attempt_that_reaches_its_node_a_heartbeat_timeout_late_does_not_run() -> None:
    ran: list[str] = []

    async def turn() -> None:
        refuse_stale(2.0)
        ran.append("turn")

    with pytest.raises(ApplicationError) as refused:
        await started(2.5).run(turn)
    assert refused.value.type == STALE_ATTEMPT
    assert ran == []
    await started(0.3).run(turn)  # in time: its beats keep it the server's
    assert ran == ["turn"]


@pytest.mark.parametrize(
    ("details", "gone"),
    [
        (ActivityCancellationDetails(not_found=True), True),
        (ActivityCancellationDetails(timed_out=True), True),
        (ActivityCancellationDetails(cancel_requested=True), False),  # an interrupt: abort
        (ActivityCancellationDetails(worker_shutdown=True), False),  # aborted as `shutdown`
    ],
    ids=["not-found", "timed-out", "requested", "shutdown"],
)
async def test_only_an_attempt_the_server_gave_up_is_superseded(
    details: ActivityCancellationDetails, gone: bool
) -> None:
    env = ActivityEnvironment()
    seen: list[bool] = []

    async def turn() -> None:
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class():
            seen.append(superseded())
            raise

    async with anyio.create_task_group() as tg:

        async def cancel_soon() -> None:
            await anyio.sleep(0.05)
            env.cancel(details)

        tg.start_soon(cancel_soon)
        with pytest.raises(BaseException):  # noqa: B017, PT011  # the SDK's cancellation
            await env.run(turn)
    assert seen == [gone]


def failure(cause: BaseException) -> ActivityError:
    exc = ActivityError(
        "activity failed",
        scheduled_event_id=1,
        started_event_id=2,
        identity="n0",
        activity_type="run_items",
        activity_id="1",
        retry_state=RetryState.MAXIMUM_ATTEMPTS_REACHED,
    )
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize(
    ("cause", "silent"),
    [
        (TimeoutError("t", type=TimeoutType.HEARTBEAT, last_heartbeat_details=[]), True),
        (ApplicationError("lost", type=LEASE_LOST), True),
        (ApplicationError("late", type=STALE_ATTEMPT), True),
        # The turn's own bound ran out: its own failure, not a node's silence.
        (TimeoutError("t", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[]), False),
        (ApplicationError("bug", type="RuntimeError"), False),
        (ApplicationError("stop", type=NODE_STOPPING), False),  # run again, by its own path
    ],
    ids=["heartbeat", "lease-lost", "stale", "start-to-close", "error", "node-stopping"],
)
def test_a_last_attempt_ended_by_silence_is_told_from_the_turns_own_failure(
    cause: BaseException, silent: bool
) -> None:
    assert silenced(failure(cause)) is silent
