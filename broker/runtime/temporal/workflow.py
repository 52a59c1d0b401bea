"""A session's mailbox as a Temporal workflow: its id is the session label.

Deterministic and free of I/O: it runs the pure queue machine
(`core.queue_machine`) on the workflow's clock (`workflow.now()`), and
everything that touches the ledger or an engine is an activity (activities.py).
The short ledger steps (the queue's setup at a run's start, drops) are local
activities: they run on this workflow's worker inside its task, with no activity
task, no round trip through the server and no workflow task for their result.
A turn stays a regular activity: it heartbeats, and another node takes it over.

One turn at a time: Temporal keeps one live run per workflow id across the cluster,
and a run starts a turn activity only on the machine's `StartTurn`, after the last
turn's activity has finished (an aborted one is cancelled with
WAIT_CANCELLATION_COMPLETED, so its commit is done before the next turn starts). An
arrival is taken once: a signal sent again carries an item id already seen and is
ignored, and the activity skips items the ledger no longer holds open, so even a new
run cannot run a finished item twice. An interrupt cancels the running turn's
activity; the reason, steered items and chat commands are pushed to the turn on this
node (`push_control`), and the `control` query answers a turn that runs elsewhere.

Silence is not failure: a turn activity whose last attempt ended because its node went
silent (no heartbeat in time, or its session's lease lost) is started again, its
attempts afresh, for as long as the turn's own bound (`turn_timeout_s`) from its first
start, since a paused node's pending polls take retries it cannot run. A turn activity
that failed every attempt otherwise ends as a local turn that fails: a
`fail_items` activity records it failed with the runtime's reason and tells the
person, consuming its items, before the next turn starts (else they would be handed
over and fail again, for ever); if that too fails, the items are dropped (reason
`failed`), as are chat commands whose activity failed every attempt, since an error
raised would fail the run and strand what waits. A node that stops is not a failure:
its turn starts again, on another node or after the restart.

A run ends when quiet (no turn, nothing waiting) for `idle_s`, told by one timer that
outlives the turns between; the next arrival's signal-with-start begins a new run. A
run goes on as a new one (continue-as-new between two turns, carrying what waits) when
Temporal suggests it or once its history holds `history_max_events`, as a takeover
replays the whole history. What changed the commands a run makes is behind
`workflow.patched` markers (`LEAN`, `BOUNDED`), so a run an older node began replays
on a newer one as its history has it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout  # not the builtin

with workflow.unsafe.imports_passed_through():
    from broker.runtime.temporal.control import Control, ControlPush
    from broker.runtime.temporal.idle_timer import IdleTimer
    from broker.runtime.temporal.replays import ReplayNote
    from broker.runtime.temporal.session_records import (
        BOUNDED,
        CONTROL_QUERY,
        DROP_ITEMS,
        FAIL_ITEMS,
        FAILED_DROP,
        ITEM_SIGNAL,
        LEAN,
        LEASE_LOST,
        NODE_STOPPING,
        PUSH_CONTROL,
        RUN_COMMANDS,
        RUN_ITEMS,
        SESSION_QUEUE,
        SILENCES,
        STALE_ATTEMPT,
        Arrival,
        Drops,
        FailedTurn,
        QueueSetup,
        SessionSpec,
        TurnOrder,
        TurnResult,
    )
    from core import queue_machine as m

# A retry after a timeout (a dead node's turn or short activity) waits this first:
# Temporal's default 1 s would add to every session's failover, after the heartbeat
# bound. The later waits grow 4 times as fast as the default, so 5 attempts still span
# about 9 s (0.2 + 0.8 + 3.2 + 5) for a fault that lasts: a ledger coming back.
FIRST_RETRY = timedelta(seconds=0.2)
RETRY_GROWTH = 4.0
RETRY_MAX = timedelta(seconds=5)
TURN_RETRY = RetryPolicy(
    initial_interval=FIRST_RETRY,
    backoff_coefficient=RETRY_GROWTH,
    maximum_interval=RETRY_MAX,
    maximum_attempts=5,
)
QUICK_RETRY = RetryPolicy(  # reads and idempotent writes: until they land
    initial_interval=FIRST_RETRY, backoff_coefficient=RETRY_GROWTH, maximum_interval=RETRY_MAX
)


def quick_activity_bound(spec: SessionSpec) -> timedelta:
    """A ledger read or idempotent write: a node that died running one is noticed as
    soon as a silent turn is (`heartbeat_timeout_s`), not after a turn's bound; the
    retry that follows is harmless."""
    return timedelta(seconds=spec.heartbeat_timeout_s)


@workflow.defn(name="Session")
class SessionWorkflow:
    @workflow.init  # given the spec before the signals of the run's first task
    def __init__(self, spec: SessionSpec) -> None:
        self._arrivals: list[Arrival] = []
        self._seen: set[str] = set()
        if spec.history_max_events:  # bounded runs, of this version: a carried item
            self._seen.update(str(a.record[0]) for a in spec.carried)  # sent again: a repeat
        self._records: dict[str, list[Any]] = {}
        self._commands: list[list[Any]] = []
        self._abort: dict[int, str] = {}
        self._steer: dict[int, list[list[Any]]] = {}
        self._turn_commands: dict[int, list[list[Any]]] = {}
        self._pending: m.StartTurn | None = None
        self._turn: tuple[int, workflow.ActivityHandle[TurnResult]] | None = None
        self._order: TurnOrder | None = None  # the running turn's, for `fail_items`
        self._since = 0.0  # when the running turn's first activity began
        self._ended_unstarted: int | None = None
        self._noted: dict[str, list[Any]] = {}  # dropped under "summarize", for the note
        self._mode: str | None = None
        self._idle = IdleTimer()
        self._news = False  # the running turn's control changed, not pushed yet

    @workflow.signal(name=ITEM_SIGNAL)
    def arrive(self, arrival: Arrival) -> None:
        item_id = str(arrival.record[0])
        if item_id in self._seen:
            return
        self._seen.add(item_id)
        self._arrivals.append(arrival)

    @workflow.query(name=CONTROL_QUERY)
    def control(self, turn_no: int) -> Control:
        return Control(
            self._abort.get(turn_no),
            list(self._steer.get(turn_no, ())),
            list(self._turn_commands.get(turn_no, ())),
            len(self.state.backlog),
        )

    @workflow.run
    async def run(self, spec: SessionSpec) -> None:
        self.spec = spec
        replay = ReplayNote()
        setup = await quick_step(SESSION_QUEUE, spec.label, spec, QueueSetup)
        limits = self._configure(setup)
        carried = [a for a in spec.carried if not a.command]
        self._commands.extend(a.record for a in spec.carried if a.command)
        for arrival in carried:
            self._records[str(arrival.record[0])] = arrival.record
            self._seen.add(str(arrival.record[0]))
        # What the last run held, as a restart finds it: its batch starts as it would have.
        self.state = m.State.initial(limits, [self._item(a) for a in carried])
        await self._handle(m.Resume())
        while True:
            replay.caught_up()
            await self._take_events()
            await self._push_news()
            await self._finish_turn()
            if self._history_full():
                workflow.continue_as_new(self._carry_over())
            await self._run_commands()
            self._start_turn()
            if self._quiet():
                if not await self._wait_quiet(spec.idle_s):
                    return  # quiet for `idle_s`: the run ends
                continue
            self._idle.since = None
            deadline = self.state.collect_deadline
            timeout = None if deadline is None else max(0.0, deadline - self._now())
            if not await self._wait(timeout):
                await self._handle(m.Tick())

    async def _wait_quiet(self, idle_s: float) -> bool:
        """False once quiet for `idle_s`."""
        if workflow.patched(LEAN):
            return await self._idle.wait(self._now(), idle_s, self._due)
        return await self._wait(idle_s) or not self._quiet()  # a timer a spell

    def _history_full(self) -> bool:
        """Past Temporal's suggested history size, or past the spec's
        bound, go on as a new run, between turns."""
        if self._turn is not None or self._ended_unstarted is not None:
            return False
        info = workflow.info()
        if info.is_continue_as_new_suggested():
            return True
        bound = self.spec.history_max_events
        if not 0 < bound <= info.get_current_history_length() or self._noted:
            return False  # a note of dropped items waits for its turn: it is not carried
        return workflow.patched(BOUNDED)  # asked only where the bound cuts

    def _carry_over(self) -> SessionSpec:
        records, s = self._records, self.state
        held = (*(s.running.items + s.running.steered if s.running else ()), *s.backlog)
        waiting = [Arrival(records[i.id], i.mode) for i in held if i.id in records]
        commands = [Arrival(record, None, command=True) for record in self._commands]
        spec = self.spec
        return SessionSpec(
            spec.label,
            spec.idle_s,
            spec.steerable,
            spec.turn_timeout_s,
            spec.heartbeat_timeout_s,
            [*waiting, *commands, *self._arrivals],
            spec.history_max_events,
        )

    def _configure(self, setup: QueueSetup) -> m.Limits:
        self._mode = setup.mode
        drop: m.DropPolicy = setup.drop  # type: ignore[assignment]
        return m.Limits(setup.debounce_s, setup.cap, drop)

    def _item(self, arrival: Arrival) -> m.Item:
        """The item as the machine sees it: its mode resolved as an actor resolves it
        (broker/mailbox/session_facts.py)."""
        record = arrival.record
        source = _source(record[3])
        override: m.QueueMode | None = self._mode  # type: ignore[assignment]
        default: m.QueueMode | None = arrival.default_mode  # type: ignore[assignment]
        try:
            mode = m.resolve_mode(record[4], None, override, default, source)
        except m.ModeRefused:
            mode = m.resolve_mode(None, None, override, default, source)
        return m.Item(str(record[0]), int(record[1]), mode, source)

    def _now(self) -> float:
        return workflow.now().timestamp()

    def _quiet(self) -> bool:
        s = self.state
        return (
            s.running is None
            and not s.backlog
            and self._turn is None
            and not self._arrivals
            and not self._commands
        )

    def _due(self) -> bool:
        turn = self._turn
        done = turn is not None and turn[1].done()
        return bool(self._arrivals or done or self._ended_unstarted is not None)

    async def _wait(self, seconds: float | None) -> bool:
        """Until something happens (True) or `seconds` pass (False)."""
        if seconds is None:
            await workflow.wait_condition(self._due)
            return True
        try:
            await workflow.wait_condition(self._due, timeout=timedelta(seconds=seconds))
        except TimeoutError:
            return False
        return True

    async def _take_events(self) -> None:
        arrivals, self._arrivals = self._arrivals, []
        for arrival in arrivals:
            if arrival.command:
                # While a turn runs, its actor answers it (`/status`, `/stop`) as a
                # local actor would; else it runs between turns.
                turn = self._turn
                if turn is not None:
                    self._turn_commands.setdefault(turn[0], []).append(arrival.record)
                    self._news = True
                else:
                    self._commands.append(arrival.record)
                continue
            self._records[str(arrival.record[0])] = arrival.record
            item = self._item(arrival)
            await self._handle(m.Arrived(item, self.spec.steerable))

    async def _handle(self, event: m.Event) -> None:
        try:
            self.state, actions = m.handle(self.state, event, self._now())
        except m.IllegalTransition:
            workflow.logger.exception("illegal queue transition", extra={"event": repr(event)})
            return
        drops: list[tuple[str, str]] = []
        for action in actions:
            match action:
                case m.StartTurn():
                    self._pending = action
                case m.AbortTurn():
                    self._abort_turn(action.turn_no, action.reason)
                    self._news = True
                case m.Steer():
                    record = self._records[action.item.id]
                    self._steer.setdefault(action.turn_no, []).append(record)
                    self._news = True
                case m.Drop():
                    # A stopped turn's commit recorded its items (as the actor does).
                    if action.reason not in ("stopped", "cancelled"):
                        drops.append((action.item.id, action.reason))
                    if action.reason == "cap:summarize":
                        self._noted[action.item.id] = self._records[action.item.id]
                case m.WakeAt():
                    pass  # the deadline is in the state: `run` waits for it
        if drops:
            await quick_step(DROP_ITEMS, Drops(self.spec.label, drops), self.spec)

    async def _push_news(self) -> None:
        """The running turn's control state, to its node if it runs here."""
        news, self._news, turn = self._news, False, self._turn
        if not news or turn is None or not workflow.patched(LEAN):
            return
        await push_control(self.spec, ControlPush(self.spec.label, turn[0], self.control(turn[0])))

    def _abort_turn(self, turn_no: int, reason: str) -> None:
        self._abort[turn_no] = reason
        turn = self._turn
        if turn is not None and turn[0] == turn_no:
            turn[1].cancel()

    def _start_turn(self) -> None:
        start = self._pending
        if start is None or self._turn is not None or self._commands:
            return
        self._pending = None
        if start.turn_no in self._abort:  # aborted before it began: nothing ran
            self._ended_unstarted = start.turn_no
            return
        order = TurnOrder(
            self.spec.label,
            start.turn_no,
            [self._records[i.id] for i in start.items],
            [self._noted.pop(i.id) for i in start.dropped_note if i.id in self._noted],
        )
        self._since = self._now()
        self._run_turn(order)

    def _run_turn(self, order: TurnOrder) -> None:
        handle = workflow.start_activity(
            RUN_ITEMS,
            order,
            result_type=TurnResult,
            start_to_close_timeout=timedelta(seconds=self.spec.turn_timeout_s),
            heartbeat_timeout=timedelta(seconds=self.spec.heartbeat_timeout_s),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            retry_policy=TURN_RETRY,
        )
        self._turn, self._order = (order.turn_no, handle), order

    async def _finish_turn(self) -> None:
        if self._ended_unstarted is not None:
            turn_no, self._ended_unstarted = self._ended_unstarted, None
            self._abort.pop(turn_no, None)
            await self._handle(m.TurnEnded(turn_no, "aborted"))
            self._forget_finished()
            return
        turn = self._turn
        if turn is None or not turn[1].done():
            return
        turn_no, handle = turn
        order, self._turn, self._order = self._order, None, None
        try:
            result = handle.result()
        except ActivityError as exc:
            if isinstance(exc.cause, CancelledError):
                result = TurnResult("aborted")
            elif _node_stopped(exc) and order is not None:
                self._run_turn(order)  # not a failure; it runs again
                return
            elif order is not None and silence_retried(self.spec, exc, self._since):
                self._run_turn(order)
                return
            else:
                result = await fail_turn(self.spec, order, exc)
        self._abort.pop(turn_no, None)
        self._steer.pop(turn_no, None)
        taken = set(result.commands_taken)
        for command in self._turn_commands.pop(turn_no, ()):
            if str(command[0]) not in taken:  # came too late for the turn: after it
                self._commands.append(command)
        outcome: m.Outcome = result.outcome  # type: ignore[assignment]
        await self._handle(m.TurnEnded(turn_no, outcome, tuple(result.steer_taken)))
        self._forget_finished()

    def _forget_finished(self) -> None:
        """Keep the records of the items the machine still holds, no others."""
        s = self.state
        live = {i.id for i in s.backlog}
        if s.running is not None:
            live.update(i.id for i in s.running.items + s.running.steered)
        for item_id in [k for k in self._records if k not in live]:
            del self._records[item_id]

    async def _run_commands(self) -> None:
        """Chat commands that came while no turn ran, or too late for one, run between
        turns, in arrival order."""
        if self._turn is not None or not self._commands:
            return
        commands, self._commands = self._commands, []
        setup = await run_commands(self.spec, commands)
        if setup is not None:  # a `/queue` changes them
            await self._handle(m.Configure(self._configure(setup)))


async def quick_step(
    name: str,
    arg: Any,
    spec: SessionSpec,
    result_type: type | None = None,
    retry: RetryPolicy = QUICK_RETRY,
) -> Any:
    """A short ledger step: a local activity, or a regular one in a run an older node
    began. Retried until it lands unless told otherwise: reads and idempotent
    writes."""
    bound = quick_activity_bound(spec)
    if workflow.patched(LEAN):
        return await workflow.execute_local_activity(
            name, arg, result_type=result_type, start_to_close_timeout=bound, retry_policy=retry
        )
    return await workflow.execute_activity(
        name, arg, result_type=result_type, start_to_close_timeout=bound, retry_policy=retry
    )


async def run_commands(spec: SessionSpec, commands: list[list[Any]]) -> QueueSetup | None:
    """The queue's limits after the commands; None when their activity failed every
    attempt (not on silent nodes only): they are dropped, the error not raised, which
    would fail the run."""
    since = workflow.now().timestamp()
    while True:
        try:
            setup: QueueSetup = await workflow.execute_activity(
                RUN_COMMANDS,
                TurnOrder(spec.label, 0, commands),
                result_type=QueueSetup,
                start_to_close_timeout=timedelta(seconds=spec.turn_timeout_s),
                heartbeat_timeout=timedelta(seconds=spec.heartbeat_timeout_s),
                retry_policy=RetryPolicy(maximum_attempts=3),
            )
            return setup
        except ActivityError as exc:
            if not silence_retried(spec, exc, since):
                break
    workflow.logger.error("chat commands failed every attempt; they are dropped")
    await drop_failed(spec, spec.label, commands)
    return None


def silence_retried(spec: SessionSpec, exc: ActivityError, since: float) -> bool:
    """True when an activity's attempts ran out on silent nodes within the turn's own
    bound from `since`: it is to start again."""
    if not silenced(exc) or workflow.now().timestamp() - since >= spec.turn_timeout_s:
        return False
    workflow.logger.warning("attempts ran out on silent nodes; started again")
    return workflow.patched(SILENCES)


async def push_control(spec: SessionSpec, push: ControlPush) -> None:
    """The news pushed to the turn, best effort: a push that fails or misses leaves it
    to the query."""
    try:
        await workflow.execute_local_activity(
            PUSH_CONTROL,
            push,
            result_type=bool,
            start_to_close_timeout=quick_activity_bound(spec),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
    except ActivityError as exc:
        workflow.logger.info("control push failed", extra={"error": str(exc)})


async def fail_turn(spec: SessionSpec, order: TurnOrder | None, exc: ActivityError) -> TurnResult:
    """`fail_items` runs the items through the turn actor once more, so it
    may fail as the turn did (a bug on that path); then, after its attempts, the
    items are dropped with reason `failed`, a plain write retried until it lands:
    the session is never held for ever, and no item is handed over again."""
    if order is None:
        return TurnResult("failed")
    cause = exc.cause
    kind = cause.type if isinstance(cause, ApplicationError) and cause.type else None
    failed = FailedTurn(order, kind or type(cause or exc).__name__)
    workflow.logger.warning("turn failed every attempt", extra={"kind": failed.kind})
    try:
        result: TurnResult = await workflow.execute_activity(
            FAIL_ITEMS,
            failed,
            result_type=TurnResult,
            start_to_close_timeout=timedelta(seconds=spec.turn_timeout_s),
            heartbeat_timeout=timedelta(seconds=spec.heartbeat_timeout_s),
            retry_policy=TURN_RETRY,
        )
        return result
    except ActivityError:
        workflow.logger.error("a failed turn could not be recorded; its items are dropped")
    await drop_failed(spec, order.label, order.records)
    return TurnResult("failed")


async def drop_failed(spec: SessionSpec, label: str, records: list[list[Any]]) -> None:
    """The last resort after `fail_items` failed: the items dropped (`failed`), a write
    retried until it lands."""
    drops = [(str(record[0]), FAILED_DROP) for record in records]
    retry = RetryPolicy(maximum_interval=timedelta(seconds=5))
    await quick_step(DROP_ITEMS, Drops(label, drops), spec, retry=retry)


def silenced(exc: ActivityError) -> bool:
    """The last attempt's node went silent: no heartbeat in time, the lease lost, or
    the attempt reached its node too late to run."""
    cause = exc.cause
    if isinstance(cause, ActivityTimeout):
        return cause.type == TimeoutType.HEARTBEAT
    return isinstance(cause, ApplicationError) and cause.type in (LEASE_LOST, STALE_ATTEMPT)


def _node_stopped(exc: ActivityError) -> bool:
    cause = exc.cause
    return isinstance(cause, ApplicationError) and cause.type == NODE_STOPPING


def _source(value: Any) -> m.Source:
    sources: tuple[m.Source, ...] = ("person", "worker", "timer", "operator")
    return next((s for s in sources if s == value), "operator")
