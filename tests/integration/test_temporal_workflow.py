"""The session workflow on a real Temporal dev server, with fake activities
standing in for the node's (no daemon): what it decides, turn by turn."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle, WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from broker.runtime.temporal.control import Control, ControlPush
from broker.runtime.temporal.devserver import DevServer
from broker.runtime.temporal.payloads import data_converter
from broker.runtime.temporal.session_records import (
    CONTROL_QUERY,
    DROP_ITEMS,
    FAIL_ITEMS,
    ITEM_SIGNAL,
    LEASE_LOST,
    NODE_STOPPING,
    PUSH_CONTROL,
    RUN_COMMANDS,
    RUN_ITEMS,
    SESSION_QUEUE,
    STALE_ATTEMPT,
    Arrival,
    Drops,
    FailedTurn,
    QueueSetup,
    SessionSpec,
    TurnOrder,
    TurnResult,
)
from broker.runtime.temporal.workflow import SessionWorkflow
from tests.integration.wire import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.temporal]
WAIT = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the Temporal SDK is asyncio's


@dataclass
class Node:
    """Fake activities: each turn waits until the test releases it (or it is cancelled)."""

    debounce_s: float = 0.0
    turns: list[list[str]] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    release: anyio.Event = field(default_factory=anyio.Event)
    started: anyio.Event = field(default_factory=anyio.Event)
    failing: str | None = None  # an error type: each turn's activity fails with it
    failed: list[FailedTurn] = field(default_factory=list)
    fail_breaks: bool = False  # recording the failed turn fails too
    dropped: list[tuple[str, str]] = field(default_factory=list)
    pushed: list[ControlPush] = field(default_factory=list)
    commands_fail: bool = False  # each `run_commands` fails, as after its last attempt
    commands: list[list[str]] = field(default_factory=list)
    # Runs of a turn (or of commands) whose last attempt, as the workflow sees it,
    # ended on a silent node: each raises this error type, until none is left.
    silent: list[str] = field(default_factory=list)

    @activity.defn(name=SESSION_QUEUE)
    async def session_queue(self, label: str) -> QueueSetup:
        return QueueSetup(self.debounce_s, None, "old")

    @activity.defn(name=RUN_ITEMS)
    async def run_items(self, order: TurnOrder) -> TurnResult:
        self.turns.append([str(r[0]) for r in order.records])
        self.started.set()
        self._silence()
        if self.failing is not None:
            # Not retryable: what the workflow sees once the fifth attempt failed.
            raise ApplicationError("it broke", type=self.failing, non_retryable=True)
        try:
            while not self.release.is_set():
                activity.heartbeat()
                with anyio.move_on_after(0.05):
                    await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled.append(order.turn_no)
            raise
        return TurnResult("completed")

    @activity.defn(name=RUN_COMMANDS)
    async def run_commands(self, order: TurnOrder) -> QueueSetup:
        self.commands.append([str(r[0]) for r in order.records])
        self._silence()
        if self.commands_fail:
            raise ApplicationError("it broke", type="RuntimeError", non_retryable=True)
        return await self.session_queue(order.label)

    def _silence(self) -> None:
        if self.silent:  # not retryable: as the workflow sees the last attempt
            raise ApplicationError("silent", type=self.silent.pop(0), non_retryable=True)

    @activity.defn(name=DROP_ITEMS)
    async def drop_items(self, drops: Drops) -> None:
        self.dropped.extend(drops.drops)

    @activity.defn(name=FAIL_ITEMS)
    async def fail_items(self, failed: FailedTurn) -> TurnResult:
        self.failed.append(failed)
        if self.fail_breaks:
            raise ApplicationError("it broke too", type="RuntimeError", non_retryable=True)
        return TurnResult("failed")

    @activity.defn(name=PUSH_CONTROL)
    async def push_control(self, push: ControlPush) -> bool:
        self.pushed.append(push)
        return True

    async def next_turn(self) -> None:
        with anyio.fail_after(WAIT):
            await self.started.wait()
        self.started = anyio.Event()


@pytest.fixture
async def client(temporal_server: DevServer) -> Client:
    return await Client.connect(temporal_server.address)


def sandboxed() -> WorkflowRunner:
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("broker")
    )


# `[runtime] workflow_sandbox`: the node runs its workflows in either.
RUNNERS = [sandboxed, UnsandboxedWorkflowRunner]


def session_worker(
    client: Client, fake: Node, queue: str, runner: Callable[[], WorkflowRunner] = sandboxed
) -> Worker:
    """A worker of the session workflow whose activities are `fake`'s."""
    return Worker(
        client,
        task_queue=queue,
        workflows=[SessionWorkflow],
        activities=[
            fake.session_queue,
            fake.run_items,
            fake.run_commands,
            fake.drop_items,
            fake.fail_items,
            fake.push_control,
        ],
        workflow_runner=runner(),
    )


@pytest.fixture
async def node(client: Client) -> AsyncIterator[tuple[Node, str]]:
    fake = Node()
    queue = f"wf-{uuid.uuid4().hex[:10]}"
    worker = session_worker(client, fake, queue)
    async with worker:
        yield fake, queue


def record(item: str, seq: int, source: str = "person") -> list[Any]:
    """An ItemInfo's fields as the signal carries them (ledger/items.py)."""
    return [item, seq, "s", source, None, "queued", None, None, "c", f"m-{item}"] + [None] * 8


async def arrive(
    client: Client,
    queue: str,
    label: str,
    rec: list[Any],
    mode: str,
    idle_s: float = 5,
    history_max_events: int = 0,
    turn_timeout_s: float = 60,
    command: bool = False,
) -> WorkflowHandle[Any, Any]:
    spec = SessionSpec(
        label,
        idle_s,
        steerable=True,
        turn_timeout_s=turn_timeout_s,
        heartbeat_timeout_s=1,
        history_max_events=history_max_events,
    )
    return await client.start_workflow(
        SessionWorkflow.run,
        spec,
        id=label,
        task_queue=queue,
        start_signal=ITEM_SIGNAL,
        start_signal_args=[Arrival(rec, mode, command=command)],
    )


async def until(check: Callable[[], bool], what: str) -> None:
    async def holds() -> bool:
        return check()

    await wait_until(holds, what, WAIT)


async def test_followups_run_one_turn_each_in_order(client: Client, node: tuple[Node, str]) -> None:
    fake, queue = node
    label = f"s-{uuid.uuid4().hex[:8]}"
    await arrive(client, queue, label, record("a", 1), "followup")
    await fake.next_turn()
    await arrive(client, queue, label, record("b", 2), "followup")
    await arrive(client, queue, label, record("c", 3), "followup")
    fake.release.set()
    await until(lambda: len(fake.turns) == 3, "three turns")
    assert fake.turns == [["a"], ["b"], ["c"]]


async def test_a_signal_sent_twice_runs_once(client: Client, node: tuple[Node, str]) -> None:
    fake, queue = node
    fake.release.set()
    label = f"s-{uuid.uuid4().hex[:8]}"
    await arrive(client, queue, label, record("a", 1), "followup")
    await arrive(client, queue, label, record("a", 1), "followup")  # a node's retry
    await arrive(client, queue, label, record("b", 2), "followup")
    await until(lambda: len(fake.turns) == 2, "two turns")
    await anyio.sleep(0.3)  # a third turn would start within this
    assert fake.turns == [["a"], ["b"]]


async def test_an_interrupt_cancels_the_turn_and_reruns_everything_once(
    client: Client, node: tuple[Node, str]
) -> None:
    fake, queue = node
    label = f"s-{uuid.uuid4().hex[:8]}"
    handle = await arrive(client, queue, label, record("a", 1), "followup")
    await fake.next_turn()
    await arrive(client, queue, label, record("b", 2), "followup")
    await arrive(client, queue, label, record("c", 3), "interrupt")
    await until(lambda: fake.cancelled == [1], "the first turn cancelled")
    assert [(p.turn_no, p.control.abort) for p in fake.pushed] == [(1, "interrupt")]
    await fake.next_turn()
    control = await handle.query(CONTROL_QUERY, 2, result_type=Control)
    assert control.abort is None
    fake.release.set()
    assert fake.turns == [["a"], ["a", "b", "c"]]


async def test_an_unsandboxed_worker_decides_as_the_sandboxed_one(
    temporal_server: DevServer,
) -> None:
    """`[runtime] workflow_sandbox = false`, with the node's payload converter
    (payloads.py): followups, then an interrupt that cancels the running turn and runs
    everything once; the history it made replays in the sandbox and out of it."""
    client = await Client.connect(temporal_server.address, data_converter=data_converter())
    fake, queue = Node(), f"wf-{uuid.uuid4().hex[:10]}"
    async with session_worker(client, fake, queue, UnsandboxedWorkflowRunner):
        label = f"s-{uuid.uuid4().hex[:8]}"
        handle = await arrive(client, queue, label, record("a", 1), "followup")
        await fake.next_turn()
        await arrive(client, queue, label, record("b", 2), "followup")
        await arrive(client, queue, label, record("c", 3), "interrupt")
        await until(lambda: fake.cancelled == [1], "the first turn cancelled")
        await fake.next_turn()
        fake.release.set()
        await arrive(client, queue, label, record("d", 4), "followup")
        await until(lambda: len(fake.turns) == 3, "the third turn")
        assert fake.turns == [["a"], ["a", "b", "c"], ["d"]]
        history = await handle.fetch_history()
    for runner in RUNNERS:
        await replayer(runner).replay_workflow(history)


async def test_a_run_ends_after_idle_s_quiet_on_one_timer_not_one_a_turn(
    client: Client, node: tuple[Node, str]
) -> None:
    fake, queue = node
    fake.release.set()
    label = f"s-{uuid.uuid4().hex[:8]}"
    for n in range(4):
        handle = await arrive(client, queue, label, record(f"i{n}", n + 1), "followup", 1.0)
        await until(lambda n=n: len(fake.turns) == n + 1, f"turn {n + 1}")  # type: ignore[misc]
    with anyio.fail_after(WAIT):
        await handle.result()  # the run ends by itself once quiet
    events = [e async for e in handle.fetch_history_events()]
    kinds = [EventType.Name(e.event_type) for e in events]
    assert kinds.count("EVENT_TYPE_ACTIVITY_TASK_COMPLETED") == 4
    assert "EVENT_TYPE_TIMER_CANCELED" not in kinds
    assert kinds.count("EVENT_TYPE_TIMER_STARTED") <= 2
    last_turn = max(
        e.event_time.ToDatetime()
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    )
    # Quiet for idle_s after its last turn, not from the first timer's start.
    assert (events[-1].event_time.ToDatetime() - last_turn).total_seconds() >= 0.9
    await replayer().replay_workflow(await handle.fetch_history())  # deterministic


def replayer(runner: Callable[[], WorkflowRunner] = sandboxed) -> Replayer:
    return Replayer(
        workflows=[SessionWorkflow], workflow_runner=runner(), data_converter=data_converter()
    )


@pytest.mark.parametrize("runner", RUNNERS, ids=["sandboxed", "unsandboxed"])
async def test_a_run_an_older_node_began_replays_on_this_code(
    runner: Callable[[], WorkflowRunner],
) -> None:
    """workflow.py: the history of a run of five turns that ended for quiet,
    made by the code before the local short steps, the single idle timer and the
    pushed news (`2822096`), replays here without a non-determinism error, in the
    sandbox or not, its payloads (the SDK's own JSON) read by the node's converter."""
    saved = Path(__file__).parent / "histories" / "session_before_lean.json"
    history = WorkflowHistory.from_json("before-lean", saved.read_text())
    await replayer(runner).replay_workflow(history)


@pytest.mark.parametrize("runner", RUNNERS, ids=["sandboxed", "unsandboxed"])
async def test_a_history_longer_than_the_bound_made_before_it_replays(
    runner: Callable[[], WorkflowRunner],
) -> None:
    """workflow.py: a run of twelve turns (116 events, past the default bound of
    `history_max_events`) made by the code before the bound (`c7188e5`) replays here
    as it was: its input names no bound, and the cut is behind a patch."""
    saved = Path(__file__).parent / "histories" / "session_before_bound.json"
    history = WorkflowHistory.from_json("before-bound", saved.read_text())
    assert len(history.events) > 100
    await replayer(runner).replay_workflow(history)


async def test_a_steer_reaches_the_running_turn_through_the_query(
    client: Client, node: tuple[Node, str]
) -> None:
    fake, queue = node
    label = f"s-{uuid.uuid4().hex[:8]}"
    handle = await arrive(client, queue, label, record("a", 1), "followup")
    await fake.next_turn()
    await arrive(client, queue, label, record("b", 2), "steer")

    async def steered() -> list[str]:
        control = await handle.query(CONTROL_QUERY, 1, result_type=Control)
        return [str(r[0]) for r in control.steer]

    async def steered_b() -> bool:
        return await steered() == ["b"]

    await wait_until(steered_b, "b steered into turn 1", WAIT)
    # Pushed to the turn's node too (workflow.py), with no query asked.
    pushed = [(p.turn_no, [str(r[0]) for r in p.control.steer]) for p in fake.pushed]
    assert (1, ["b"]) in pushed
    fake.release.set()
    await anyio.sleep(0.3)  # "b" was steered, taken by no one: it runs after
    assert fake.turns == [["a"], ["b"]]


async def test_a_turn_that_fails_every_attempt_is_failed_once_and_the_next_runs(
    client: Client, node: tuple[Node, str]
) -> None:
    """workflow.py: the failed turn's items go to `fail_items` once (which
    records the turn failed and tells the person), not back into the queue; the
    session goes on with its next message."""
    fake, queue = node
    fake.failing = "RuntimeError"
    label = f"s-{uuid.uuid4().hex[:8]}"
    await arrive(client, queue, label, record("a", 1), "followup")
    await until(lambda: len(fake.failed) == 1, "the failed turn recorded")
    fake.failing = None
    fake.release.set()
    await arrive(client, queue, label, record("b", 2), "followup")
    await until(lambda: len(fake.turns) == 2, "the next turn")
    await anyio.sleep(0.3)  # a turn run again, or a second failure, would come within this
    assert fake.turns == [["a"], ["b"]]
    [failed] = fake.failed
    assert failed.kind == "RuntimeError"
    assert [str(r[0]) for r in failed.order.records] == ["a"]


async def test_a_failed_turn_that_cannot_be_recorded_drops_its_items(
    client: Client, node: tuple[Node, str]
) -> None:
    """workflow.py: when `fail_items` fails too, the items are dropped (reason
    `failed`), not handed over again, and the session goes on."""
    fake, queue = node
    fake.failing, fake.fail_breaks = "RuntimeError", True
    label = f"s-{uuid.uuid4().hex[:8]}"
    await arrive(client, queue, label, record("a", 1), "followup")
    await until(lambda: fake.dropped == [("a", "failed")], "the item dropped")
    fake.failing = None
    fake.release.set()
    await arrive(client, queue, label, record("b", 2), "followup")
    await until(lambda: len(fake.turns) == 2, "the next turn")
    assert fake.turns == [["a"], ["b"]]
    assert len(fake.failed) == 1


async def test_chat_commands_that_fail_every_attempt_are_dropped_and_the_session_goes_on(
    client: Client, node: tuple[Node, str]
) -> None:
    """workflow.py: `run_commands` failing its last attempt drops the commands
    (reason `failed`); it does not fail the run, which would strand what waits behind
    them (their signals landed: no node hands them over again) until a restart."""
    fake, queue = node
    fake.commands_fail = True
    fake.release.set()
    label = f"s-{uuid.uuid4().hex[:8]}"
    await arrive(client, queue, label, record("c", 1), "followup", command=True)
    await until(lambda: fake.dropped == [("c", "failed")], "the command dropped")
    fake.commands_fail = False
    await arrive(client, queue, label, record("a", 2), "followup")
    await until(lambda: fake.turns == [["a"]], "the next message's turn")
    assert fake.commands == [["c"]]
    described = await client.get_workflow_handle(label).describe()
    assert described.status == WorkflowExecutionStatus.RUNNING


async def test_a_turn_whose_node_stops_runs_again_and_is_not_failed(
    client: Client, node: tuple[Node, str]
) -> None:
    """A node that stops (`NodeStopping`) is not a failure: the turn starts again."""
    fake, queue = node
    fake.failing = NODE_STOPPING
    label = f"s-{uuid.uuid4().hex[:8]}"
    await arrive(client, queue, label, record("a", 1), "followup")
    await until(lambda: len(fake.turns) >= 2, "the turn started again")
    fake.failing = None
    fake.release.set()
    await arrive(client, queue, label, record("b", 2), "followup")
    await until(lambda: fake.turns[-1] == ["b"], "the next turn, after a's")
    assert fake.failed == []
    assert {tuple(t) for t in fake.turns[:-1]} == {("a",)}


async def test_a_turn_whose_attempts_ran_out_on_silent_nodes_runs_again_and_is_answered(
    client: Client, node: tuple[Node, str]
) -> None:
    """workflow.py: a turn whose last attempt lost its lease, or reached a node too
    late to run, is not failed (a paused node's polls take retries it cannot run):
    its activity starts again, and its answer is the turn's own."""
    fake, queue = node
    fake.silent = [LEASE_LOST, STALE_ATTEMPT, LEASE_LOST]
    fake.release.set()
    label = f"s-{uuid.uuid4().hex[:8]}"
    handle = await arrive(client, queue, label, record("a", 1), "followup")
    await until(lambda: len(fake.turns) == 4, "the turn run a fourth time")
    await arrive(client, queue, label, record("b", 2), "followup")
    await until(lambda: fake.turns[-1] == ["b"], "the next turn, after a's")
    assert fake.turns == [["a"]] * 4 + [["b"]]
    assert fake.failed == [] and fake.dropped == []
    await replayer().replay_workflow(await handle.fetch_history())  # deterministic


async def test_a_turn_silent_past_its_own_bound_is_failed(
    client: Client, node: tuple[Node, str]
) -> None:
    """workflow.py: silence is retried only within the turn's bound (`turn_timeout_s`)
    from its first start: a turn whose every node goes silent (one that kills or
    stalls each node it runs on) is failed at last, and the session goes on."""
    fake, queue = node
    fake.silent = [LEASE_LOST] * 1000
    label = f"s-{uuid.uuid4().hex[:8]}"
    await arrive(client, queue, label, record("a", 1), "followup", turn_timeout_s=1)
    await until(lambda: len(fake.failed) == 1, "the turn failed")
    runs = len(fake.turns)
    assert runs > 1
    fake.silent = []
    fake.release.set()
    await arrive(client, queue, label, record("b", 2), "followup", turn_timeout_s=1)
    await until(lambda: fake.turns[-1] == ["b"], "the next turn")
    assert fake.turns == [["a"]] * runs + [["b"]]
    assert [f.kind for f in fake.failed] == [LEASE_LOST]


async def test_chat_commands_whose_attempts_ran_out_on_silent_nodes_run_again(
    client: Client, node: tuple[Node, str]
) -> None:
    """workflow.py: as a turn, chat commands whose last attempt lost the lease run
    again rather than be dropped."""
    fake, queue = node
    fake.silent = [LEASE_LOST, LEASE_LOST]
    fake.release.set()
    label = f"s-{uuid.uuid4().hex[:8]}"
    await arrive(client, queue, label, record("c", 1), "followup", command=True)
    await until(lambda: len(fake.commands) == 3, "the commands run a third time")
    await arrive(client, queue, label, record("a", 2), "followup")
    await until(lambda: fake.turns == [["a"]], "the next message's turn")
    assert fake.commands == [["c"]] * 3
    assert fake.dropped == []


@pytest.fixture(scope="module")
def short_history_server() -> Iterator[DevServer]:
    """A dev server that suggests a new run after a few dozen history events."""
    work = Path(tempfile.mkdtemp(prefix="tmprl-", dir="/tmp"))
    server = DevServer(work, dynamic_config={"limit.historyCount.suggestContinueAsNew": "40"})
    with server:
        yield server


async def test_a_busy_session_continues_as_new_between_turns_losing_nothing(
    short_history_server: DevServer,
) -> None:
    client = await Client.connect(short_history_server.address)
    fake = Node()
    fake.release.set()
    queue = f"wf-{uuid.uuid4().hex[:10]}"
    label = f"s-{uuid.uuid4().hex[:8]}"
    worker = session_worker(client, fake, queue)
    async with worker:
        first = await arrive(client, queue, label, record("i0", 1), "followup")
        for n in range(1, 30):
            await arrive(client, queue, label, record(f"i{n}", n + 1), "followup")
        await until(lambda: len(fake.turns) == 30, "thirty turns")
        latest = await client.get_workflow_handle(label).describe()
    assert fake.turns == [[f"i{n}"] for n in range(30)]
    assert latest.run_id != first.result_run_id  # it went on as a new run


async def test_a_run_goes_on_as_new_past_its_history_bound_and_replays(
    client: Client, node: tuple[Node, str]
) -> None:
    """workflow.py: a session answered turn by turn (quiet between them, never
    long enough to end) goes on as a new run once its history holds the spec's
    bound, losing nothing and running nothing twice; each run's history replays."""
    fake, queue = node
    fake.release.set()
    label = f"s-{uuid.uuid4().hex[:8]}"
    for n in range(12):
        await arrive(client, queue, label, record(f"i{n}", n + 1), "followup", 30, 40)
        await until(lambda n=n: len(fake.turns) == n + 1, f"turn {n + 1}")  # type: ignore[misc]
    assert fake.turns == [[f"i{n}"] for n in range(12)]
    runs = [r async for r in client.list_workflows(f"WorkflowId = '{label}'")]
    assert len(runs) >= 3  # 12 turns of about 10 events each, cut at 40
    # The runs that went on as new, each with its cut. Not the newest when it is still
    # open: just after a cut its history may hold only its start event (the server
    # scheduled the new run's first workflow task 1 s after it), and the SDK's Replayer
    # given such a history waits for ever, deaf to cancellation (seen: the test's
    # timeout, then its worker's teardown hung).
    cut = [r for r in runs if r.status == WorkflowExecutionStatus.CONTINUED_AS_NEW]
    assert len(cut) >= 2
    for run in cut:
        handle = client.get_workflow_handle(label, run_id=run.run_id)
        history = await handle.fetch_history()
        # The bound, the turn that passed it, the patch's marker and the cut itself.
        assert len(history.events) <= 40 + 15
        await replayer().replay_workflow(history)  # deterministic, the cut included


async def test_a_carried_item_sent_again_before_the_new_run_starts_is_a_repeat(
    client: Client, node: tuple[Node, str], caplog: pytest.LogCaptureFixture
) -> None:
    """workflow.py: the new run counts its carried items as seen before the
    signals of its first workflow task, which the SDK applies before the run starts
    (a restarted node hands every open item over again, at any moment)."""
    fake, queue = node
    label = f"s-{uuid.uuid4().hex[:8]}"
    await arrive(client, queue, label, record("a", 1), "followup", 30, 12)
    await fake.next_turn()
    await arrive(client, queue, label, record("b", 2), "followup", 30, 12)
    await arrive(client, queue, label, record("c", 3), "followup", 30, 12)
    handle = client.get_workflow_handle(label)
    first = (await handle.describe()).run_id
    fake.release.set()  # "a" ends, past the bound: "b" and "c" are carried to a new run

    async def went_on() -> bool:
        return (await handle.describe()).run_id != first

    await wait_until(went_on, "a new run", WAIT)
    await arrive(client, queue, label, record("c", 3), "followup", 30, 12)
    await until(lambda: len(fake.turns) == 3, "three turns")
    await anyio.sleep(0.3)  # a fourth turn, or the machine's refusal, would come within this
    assert fake.turns == [["a"], ["b"], ["c"]]
    assert not [r for r in caplog.records if "illegal queue transition" in r.getMessage()]
