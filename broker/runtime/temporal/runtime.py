"""The node's side of the Temporal runtime: its client, its worker, and the hand-off
of every committed item to its session's workflow.

An item is handed over only after the ledger committed it (and, for a message, after
its ack): the ledger is the truth, the workflow a mailbox. The hand-off is a
signal-with-start of the workflow whose id is the session label, carrying the item's
record. One session's items are handed over in order, one at a time, each after the
session's earlier items that no node recorded as handed over, so the workflow's queue
machine sees them in seq order whichever nodes acked them; sessions go in parallel,
up to `MAX_SIGNALS_IN_FLIGHT`.

Nothing is dropped. A hand-off that fails is tried again, with back-off, until it
lands; while the last one failed the node answers new inbound messages `overloaded`
(`failure`). The item waits in the ledger meanwhile, and a restart hands every open
item over again. A landed hand-off is recorded in the ledger (lazily:
ledger/handoffs.py), and every `HANDOFF_CHECK_S` the node hands over the queued items
older than `HANDOFF_GRACE_S` that nobody recorded: an item acked by a node that died
before its hand-off landed is taken within their sum. Every `stuck_after_s`, as a
backstop, the node hands over again the items open since its last look that it has
not itself landed (core/rescan.py). Temporal unreachable at start is a start-up
failure naming the address (exit 69); the client is asyncio's, so the runtime needs
the asyncio backend.
"""

from __future__ import annotations

import itertools
from collections import deque
from datetime import timedelta

import anyio
import anyio.abc
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from broker.config import RuntimeSettings, Settings
from broker.mailbox.commands import is_command
from broker.mailbox.registry import Mailboxes
from broker.runtime import RuntimeUnreachable
from broker.runtime.temporal.activities import Activities
from broker.runtime.temporal.payloads import data_converter
from broker.runtime.temporal.session_records import ITEM_SIGNAL, Arrival, SessionSpec
from broker.runtime.temporal.timer_workflow import TimerWorkflow
from broker.runtime.temporal.timers import TemporalTimers, TimerActivities
from broker.runtime.temporal.workflow import SessionWorkflow
from core import rescan
from ledger.port.records import ItemInfo
from plumbing import logs
from plumbing.ids import now_ms

log = logs.get("broker.runtime.temporal")
MAX_SIGNALS_IN_FLIGHT = 64
RETRY_MAX_S = 2.0
# A hand-off takes milliseconds when Temporal answers; one unanswered this long makes
# the node say `overloaded` rather than ack messages it cannot hand over, but it is
# not cut short: a loaded server answers late, and a hand-off cancelled and sent again
# only adds to its load (each try cut at this bound, none landed for tens of seconds).
# A try is given up, and sent again, only past SIGNAL_GIVE_UP_S.
SIGNAL_TIMEOUT_S = 1.0
SIGNAL_GIVE_UP_S = 10.0
TURN_MARGIN_S = 60.0  # a turn's activity may also compact: beyond the engine's own bound
# How often a node looks for items whose hand-off nobody recorded, and how old such an
# item must be: longer than a live node takes to land a hand-off and record it (a
# signal's bound, its retries under load, and the lazy write), so that a live node's
# item is seldom signalled twice. Their sum bounds the hand-over of a dead node's items
# (docs/cluster.md, "Failover").
HANDOFF_CHECK_S = 0.5
HANDOFF_GRACE_S = 2.0
HANDOFF_PAGE = 500


class TemporalUnreachable(RuntimeUnreachable):
    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"cannot reach Temporal at {address}: {reason}")
        self.address = address


async def connect(rt: RuntimeSettings) -> Client:
    """The client, or `TemporalUnreachable` naming the address."""
    try:
        with anyio.fail_after(rt.connect_timeout_s):
            return await Client.connect(
                rt.address,
                namespace=rt.namespace,
                runtime=_sdk(rt),
                data_converter=data_converter(),  # payloads.py: orjson, field types cached
            )
    except TimeoutError as exc:
        raise TemporalUnreachable(rt.address, f"no answer in {rt.connect_timeout_s:g} s") from exc
    except Exception as exc:  # the SDK raises RuntimeError for a refused connection
        raise TemporalUnreachable(rt.address, str(exc) or type(exc).__name__) from exc


def _sdk(rt: RuntimeSettings) -> Runtime | None:
    """The SDK's runtime with the worker's metrics served for Prometheus, or None for
    its default (no metrics)."""
    if not rt.metrics_address:
        return None
    metrics = PrometheusConfig(bind_address=rt.metrics_address, durations_as_seconds=True)
    return Runtime(telemetry=TelemetryConfig(metrics=metrics))


def workflow_runner(rt: RuntimeSettings) -> WorkflowRunner:
    """Plain code (the default) or Temporal's sandbox. The sandbox is entered for every
    payload of a workflow task (the SDK asks the workflow for each one's serialization
    context: an exec under its import hooks, about 12 a turn), and with the broker's
    modules passed through it restricts none of the workflow's calls."""
    if not rt.workflow_sandbox:
        return UnsandboxedWorkflowRunner()
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("broker")
    )


def heartbeat_throttle_s(rt: RuntimeSettings) -> float:
    """How often at most a turn's heartbeat reaches the server: a quarter of the
    heartbeat timeout, so a live node's turn is taken from it only after it missed
    three beats in a row."""
    return rt.heartbeat_timeout_s / 4


class TemporalRuntime:
    def __init__(self, settings: Settings, mailboxes: Mailboxes, client: Client) -> None:
        self.settings = settings
        self.mailboxes = mailboxes
        self.client = client
        self._waiting: dict[str, deque[ItemInfo]] = {}
        self._limit = anyio.CapacityLimiter(MAX_SIGNALS_IN_FLIGHT)
        self._tg: anyio.abc.TaskGroup | None = None
        self._failing: str | None = None
        self._in_flight: dict[int, float] = {}  # hand-offs sent, by tag: when
        self._tags = itertools.count()
        self._landed: set[str] = set()  # open items this node's signal landed
        self._open_before: frozenset[str] = frozenset()  # open at the last look
        self.handed_over = 0

    def failure(self) -> str | None:
        """Why the node cannot hand messages over now, or None: the last hand-off
        failed, or the oldest one in flight waits for longer than SIGNAL_TIMEOUT_S."""
        if self._failing is not None:
            return self._failing
        oldest = next(iter(self._in_flight.values()), None)  # in start order
        if oldest is not None and anyio.current_time() - oldest > SIGNAL_TIMEOUT_S:
            address = self.settings.runtime.address
            return f"the sessions' runtime (Temporal at {address}) is slow to answer"
        return None

    def timers(self) -> TemporalTimers:
        """The node's timers: Temporal timer workflows in place of the wheel."""
        return TemporalTimers(self.mailboxes, self.client, self.settings.runtime.task_queue)

    def install(self) -> None:
        """From now on the registry hands items to this runtime, not to local actors."""
        self.mailboxes.forward = self.hand_over

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the node's worker and its hand-offs until cancelled."""
        rt = self.settings.runtime
        worker = Worker(
            self.client,
            task_queue=rt.task_queue,
            workflows=[SessionWorkflow, TimerWorkflow],
            activities=[
                *Activities(self.mailboxes, self.client).all(),
                TimerActivities(self.mailboxes).fire_timer,
            ],
            workflow_runner=workflow_runner(rt),
            identity=self.settings.node_id or None,
            # A dead node's cached workflows move to another as soon as its turns do.
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=rt.heartbeat_timeout_s),
            # The SDK sends a turn's heartbeats to the server at most this often (its
            # own choice, 0.8 of the timeout, leaves a busy node a fifth of it to be
            # late by before its live turn is given to another node).
            max_heartbeat_throttle_interval=timedelta(seconds=heartbeat_throttle_s(rt)),
            graceful_shutdown_timeout=timedelta(seconds=1),
        )
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(worker.run)
            tg.start_soon(self._hand_over_open_items_forever)
            tg.start_soon(self._hand_over_unrecorded_forever)
            task_status.started()

    async def _hand_over_open_items_forever(self) -> None:
        """Every `stuck_after_s`, hand over again the ledger's items open since
        the last look, but those this node landed. An item acked by a node that died
        before its hand-off landed is then taken by the others; one its workflow holds
        already is ignored there (workflow.py)."""
        while True:
            await anyio.sleep(self.settings.queue.stuck_after_s)
            try:
                open_items = await self.mailboxes.ledger.open_items()
            except Exception as exc:  # a ledger that fails to read now: next round
                log.warning("could not read open items", error=str(exc))
                continue
            found = rescan.look({i.id for i in open_items}, self._open_before, self._landed)
            self._open_before, self._landed = found.open_before, set(found.landed)
            for item in open_items:
                if item.id in found.again and item.session not in self._waiting:
                    self.hand_over(item)

    async def _hand_over_unrecorded_forever(self) -> None:
        """Hand over the queued items whose hand-off nobody recorded in time
        (their acking node died first), but those this node is handing over."""
        while True:
            await anyio.sleep(HANDOFF_CHECK_S)
            before = now_ms() - int(HANDOFF_GRACE_S * 1000)
            try:
                items = await self.mailboxes.ledger.unhanded_items(before, HANDOFF_PAGE)
            except Exception as exc:  # a ledger that fails to read now: next round
                log.warning("could not read items not handed over", error=str(exc))
                continue
            for item in items:
                if item.id not in self._landed and item.session not in self._waiting:
                    self.hand_over(item)

    def _record_landed(self, item: ItemInfo) -> None:
        """Note in the ledger that this item reached its workflow. Best effort: a record
        lost costs one redundant signal by some node, which the workflow ignores."""
        try:
            self.mailboxes.ledger.submit_items_handed([item.id], now_ms())
        except Exception as exc:  # the writer closing, or overloaded
            log.debug("could not record a hand-off", item=item.id, error=str(exc))

    # -- hand-off ---------------------------------------------------

    def hand_over(self, item: ItemInfo) -> None:
        queue = self._waiting.get(item.session)
        if queue is not None:
            queue.append(item)  # its session's task takes it next
            return
        assert self._tg is not None, "the runtime is not running"
        self._waiting[item.session] = deque([item])
        self._tg.start_soon(self._hand_over_session, item.session)

    async def _hand_over_session(self, label: str) -> None:
        queue = self._waiting[label]
        try:
            async with self._limit:
                while queue:
                    await self._earlier_first(label, queue)
                    await self._signal_until_landed(queue[0])
                    queue.popleft()
        finally:
            del self._waiting[label]

    async def _earlier_first(self, label: str, queue: deque[ItemInfo]) -> None:
        """Put ahead of `queue` the session's earlier items that no node recorded as
        handed over (another node acked them and died, or is landing them now), so
        the workflow sees the session's items in the ledger's order."""
        try:
            earlier = await self.mailboxes.ledger.unhanded_before(label, queue[0].seq)
        except Exception as exc:  # the look-up is an ordering aid: the loop is the backstop
            log.warning("could not read a session's earlier items", session=label, error=str(exc))
            return
        ours = {item.id for item in queue}
        missing = [i for i in earlier if i.id not in self._landed and i.id not in ours]
        queue.extendleft(reversed(missing))

    async def _signal_until_landed(self, item: ItemInfo) -> None:
        delay = 0.05
        while True:
            try:
                tag = next(self._tags)
                self._in_flight[tag] = anyio.current_time()
                try:
                    with anyio.fail_after(SIGNAL_GIVE_UP_S):
                        await self._signal(item)
                finally:
                    del self._in_flight[tag]
            except Exception as exc:
                if self._failing is None:
                    log.error(
                        "Temporal unreachable; refusing messages until it answers",
                        address=self.settings.runtime.address,
                        error=str(exc),
                    )
                address = self.settings.runtime.address
                self._failing = f"the sessions' runtime (Temporal at {address}) is unreachable"
                await anyio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            if self._failing is not None:
                log.info("Temporal answers again", address=self.settings.runtime.address)
                self._failing = None
            self._landed.add(item.id)
            self._record_landed(item)
            self.handed_over += 1
            return

    async def _signal(self, item: ItemInfo) -> None:
        rt = self.settings.runtime
        command = item.source == "person" and is_command(item.text or "")
        arrival = Arrival(list(item), self.mailboxes.ports.default_mode(item), command)
        await self.client.start_workflow(
            SessionWorkflow.run,
            self._spec(item.session),
            id=item.session,
            task_queue=rt.task_queue,
            start_signal=ITEM_SIGNAL,
            start_signal_args=[arrival],
            retry_policy=RetryPolicy(maximum_attempts=1),
            # A workflow task a dead node held is given to another one this soon
            # (Temporal's default is 10 s): a session's failover bound.
            task_timeout=timedelta(seconds=rt.heartbeat_timeout_s),
        )

    def _spec(self, label: str) -> SessionSpec:
        s = self.settings
        q = s.queue
        engine = self.mailboxes.ports.engine
        return SessionSpec(
            label=label,
            idle_s=q.idle_stop_s,
            steerable=bool(getattr(engine, "accepts_steering", False)),
            turn_timeout_s=s.engine.timeout_s + s.engine.compaction_timeout_s + TURN_MARGIN_S,
            heartbeat_timeout_s=s.runtime.heartbeat_timeout_s,
            history_max_events=s.runtime.history_max_events,
        )
