"""A session's mailbox actor: runs the turn-lifecycle machine's actions through its ports.

What to do is decided by `core.lifecycle` (which wraps the queue-mode machine);
the actor performs its actions through `ports.ActorPorts` and reports back the events.

One actor per live session (the registry guarantees it), and a turn runs only on the
machine's `OpenTurn`, in the actor's own loop: one place a turn can run. Everything
reaches the actor as an event in its queue, handled one at a time in arrival order;
once the actor runs, `post` handles the queue at once in the poster's task (it never
awaits, so it cannot interleave with the loop), and the loop wakes only for a turn, a
timer (`lifecycle.wake_at`) and a failure.

A turn is durable at both ends: its items are marked running before the engine is
called, and its outcome is committed in one transaction before the reply is sent
(turn_commit.py). Every engine call is bounded by `engine.timeout_s`; an abort cancels
the turn's own scope; a shutdown leaves the turn uncommitted, for crash recovery to
record and re-run at the next start.

The actor writes only with room in the ledger's queue of writes: it handles an event
(which may drop an item, begin a thread, answer a command) and begins a turn only
while `has_room` holds, else awaits `admit` first (write_room.py), while later events
wait behind in its queue, in order. Room that does not come within
`ledger.writer_wait_s` is waited for again (logged each time): no turn runs without
its record, and no event is lost or reordered; a chat command that waited a whole
bound meanwhile is answered `overloaded` instead (chat.py).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

import anyio
import anyio.abc

from broker.context.session import SessionContext
from broker.mailbox import compactor
from broker.mailbox.commands import Command, CompactRequest, is_chat_command, split_commands
from broker.mailbox.ports import ActorPorts
from broker.mailbox.running_turn import RunningTurn
from broker.mailbox.session_facts import SessionFacts
from broker.mailbox.thread_start import EXPLICIT_NEW, ThreadCuts, ThreadRequest
from broker.mailbox.turn_steps import TurnSteps
from broker.mailbox.write_room import WriteRoom
from core import lifecycle as lc
from core import queue_machine as m
from ledger.port.records import ItemInfo
from plumbing import logs

log = logs.get("broker.actor")
ActorState = Literal["idle", "processing", "streaming", "compacting", "completing"]


Posted = ItemInfo | lc.Event | Command | CompactRequest | ThreadRequest


class SessionActor:
    # Whether `run` waits for the writes submitted before it: an earlier actor's.
    settle_first = True

    def __init__(self, label: str, ports: ActorPorts, *, draining: bool = False) -> None:
        self.label, self.ports, self.clock = label, ports, ports.clock
        self.items: dict[str, ItemInfo] = {}
        self.queue: deque[Posted] = deque()
        self.compact_requests: list[CompactRequest] = []
        self.wake = anyio.Event()
        self.status: ActorState = "idle"
        self.turn: RunningTurn | None = None
        self.facts = SessionFacts(SessionContext(ports.counter))
        self.steps = TurnSteps(label, ports, self.facts)
        self.threads = ThreadCuts(label, ports, self.facts)
        self.cancelled: set[str] = set()  # items cancelled before this actor held them
        queue = m.State(limits=self.limits())
        self.state = lc.State.initial(queue, ports.settings.queue.idle_stop_s, self.clock())
        self.state = self.state._replace(draining=draining)
        self._tg: anyio.abc.TaskGroup | None = None
        self._live = False  # the loop runs: `post` may handle events at once
        self._posting = False  # `_handle_queue` runs: a nested post just queues
        self._wake_by = math.inf  # when the sleeping loop wakes by itself
        self._failure: Exception | None = None  # raised by an inline drain, for the loop
        self._next_turn: RunningTurn | None = None  # opened, for the loop to run
        self._step: lc.Action | None = None  # what the running turn does next
        self._retiring = False
        self.room = WriteRoom(label, ports)  # writes only with room

    def post(self, event: Posted) -> None:
        self.queue.append(event)
        if self._posting:
            return  # the `_handle_queue` on the stack takes it next
        if not self._live:
            self.wake.set()
        elif self.room.has_room():  # writes only with room
            self._handle_posted()
        else:  # a task waits for room, then handles what waits
            assert self._tg is not None
            self.room.handle_later(self._tg.start_soon, self.queue, self._handle_posted)

    def _handle_posted(self) -> None:
        try:  # here rather than by waking the loop: a task switch and a timer less
            self._handle_queue()
        except Exception as exc:  # the loop raises it: the actor fails and is restarted
            self._failure = exc
            self.wake.set()
            return
        if lc.wake_at(self.state) < self._wake_by:
            self.wake.set()

    def drain(self) -> None:
        """The daemon stops: no turn opens from now on (lifecycle)."""
        self._apply(lc.Drain())

    @property
    def backlog(self) -> int:
        return len(self.state.queue.backlog)

    async def run(self, backlog: list[ItemInfo] | None) -> None:
        """Run until idle. `backlog=None`: recover the session from the ledger first."""
        if backlog is None:
            backlog = await self.ports.recover(self.label)
        # An earlier actor of this session may have retired with writes not yet
        # committed (a `/new`, a `/queue` override): load only after them.
        if self.settle_first:
            await self.ports.settled()
        start, ctx = await self.ports.load(self.label)
        self.facts.load(start, ctx)
        backlog = [i for i in backlog if i.id not in self.cancelled]
        backlog, commands = split_commands(backlog)
        self.items.update((item.id, item) for item in (*backlog, *commands))
        # Items posted while loading may also be in the recovered backlog.
        self.queue = deque(
            e for e in self.queue if not (isinstance(e, ItemInfo) and e.id in self.items)
        )
        queue = m.State.initial(self.limits(), [self._machine_item(i) for i in backlog])
        self.state = self.state._replace(queue=queue)
        if start.pending_thread is not None:  # decided before a crash or this actor's start
            self._thread_requested(ThreadRequest(*start.pending_thread))
        async with anyio.create_task_group() as tg:
            self._tg, self.steps.spawn = tg, tg.start_soon
            await self.room.wait(self.queue)
            for command in commands:
                self.items.pop(command.id, None)
                self.ports.chat_command(self, command, False)
            self._apply(m.Resume())
            self._live = True
            try:
                await self._loop()
            finally:
                self._live = False

    async def _loop(self) -> None:
        # `post` wakes the loop when what it handled makes work due sooner; as a
        # safety net the loop also looks again at least this often.
        recheck_s = max(self.state.idle_s, 0.05)
        while True:
            if self._failure is not None:
                raise self._failure
            if self._next_turn is not None:
                # While it runs nothing needs the loop: `post` handles events, and no
                # collect deadline is armed during a turn (core/queue_machine.py).
                turn, self._next_turn = self._next_turn, None
                await self._run_turn(turn)
                continue
            if not self.wake.is_set():
                now = self.clock()
                self._wake_by = min(lc.wake_at(self.state), now + recheck_s)
                with anyio.move_on_after(max(0.0, self._wake_by - now)):
                    await self.wake.wait()
                self._wake_by = -math.inf  # awake: posts need not wake us
            self.wake = anyio.Event()
            if not self.room.has_room():
                await self.room.wait(self.queue)
            self._handle_queue()
            if self.clock() >= lc.wake_at(self.state):
                self._apply(lc.Woke())
            if self._retiring:  # quiet: it leaves the registry in this same step
                self.ports.retire(self)
                return

    def _handle_queue(self) -> None:
        self._posting = True
        try:
            while self.queue:
                event = self.queue.popleft()
                if isinstance(event, ItemInfo):
                    self._arrived(event)
                elif isinstance(event, Command):
                    self.apply_command(event)
                elif isinstance(event, CompactRequest):
                    self.compact_requests.append(event)
                    self._apply(lc.CompactRequested())
                elif isinstance(event, ThreadRequest):
                    self._thread_requested(event)
                else:
                    self._apply(event)
        finally:
            self._posting = False

    def limits(self) -> m.Limits:
        return self.facts.limits(self.ports.settings.queue)

    def _machine_item(self, item: ItemInfo) -> m.Item:
        return self.facts.machine_item(item, self.ports.default_mode(item))

    def _arrived(self, item: ItemInfo) -> None:
        if item.channel is not None:
            self.facts.latest_inbound = item
        if is_chat_command(item):
            self.ports.chat_command(self, item, self.room.overloaded(item))
            return
        if item.id in self.cancelled:
            return
        self.items[item.id] = item
        # Only a running turn's engine matters (queue machine: ignored while idle), and
        # not into a turn of the thread a pending cut leaves behind.
        turn = self.turn
        steerable = turn is not None and turn.engine is not None and turn.engine.accepts_steering
        self._apply(m.Arrived(self._machine_item(item), steerable and not self.state.pending_new))

    def apply_command(self, command: Command) -> None:
        if command.name == "stop":
            self._apply(m.Stop())
        elif command.name == "queue":
            self.facts.override = dict(command.override or {})
            self._apply(m.Configure(self.limits()))
        elif command.name == "compact":
            self.post(CompactRequest(command.args or None))
        elif command.name == "new":
            self._thread_requested(EXPLICIT_NEW)

    def _thread_requested(self, request: ThreadRequest) -> None:
        if self.threads.request(request):
            self._apply(lc.NewThread(request.from_seq))

    def cancel(self, item_id: str) -> str:
        """`item.cancel`, in one step of the event loop: "cancelled" (it left the queue and
        can never run), "running" (a turn holds it), or "absent" (not held here: the
        ledger knows; should it still arrive or load, it is skipped)."""
        queue = self.state.queue
        if any(i.id == item_id for i in queue.backlog):
            self._apply(m.Cancel(item_id))
            return "cancelled"
        running = queue.running
        if running is not None and any(i.id == item_id for i in running.items + running.steered):
            return "running"
        self.cancelled.add(item_id)
        return "absent"

    def _apply(self, event: lc.Event) -> None:
        try:
            self.state, actions = lc.handle(self.state, event, self.clock())
        except lc.IllegalTransition:
            log.exception("illegal lifecycle transition", session=self.label, event=repr(event))
            return
        for action in actions:
            self._act(action)

    def _act(self, action: lc.Action) -> None:
        if type(action) is m.WakeAt:  # each collect arrival's: the deadline is in the state
            return
        if action is lc.CALL_ENGINE or action is lc.COMMIT or action is lc.PLAN:
            self._step = action  # the running turn's task performs it
            return
        turn = self.turn
        match action:
            case lc.Begin():
                assert turn is not None
                self.steps.begin(turn)
            case lc.Plan() | lc.CallEngine() | lc.Commit():
                self._step = action
            case lc.OpenTurn():
                self._open(action.start)
            case lc.Compact():
                if action.trigger != "manual":
                    self._step = action  # the turn's own, in the turn's task
                else:
                    assert self._tg is not None
                    self._tg.start_soon(self._manual_compaction)
            case lc.Refuse():
                assert turn is not None
                turn.refuse()
            case lc.StartNewThread():
                self.threads.cut()
            case lc.Retire():
                self._retiring = True
            case _:
                self._act_on_items(action)

    def _act_on_items(self, action: m.AbortTurn | m.Steer | m.Drop | m.WakeAt) -> None:
        """The queue machine's own actions, passed through."""
        turn = self.turn
        match action:
            case m.AbortTurn():
                if turn is not None and turn.turn_no == action.turn_no:
                    turn.abort(action.reason)
            case m.Steer():
                if turn is not None and turn.turn_no == action.turn_no:
                    turn.steer_queue.append(self.items[action.item.id])
            case m.Drop():
                self.steps.drop(action, self.items)
            case m.WakeAt():
                pass  # the deadline is in the state: `lc.wake_at`

    def _open(self, start: m.StartTurn) -> None:
        self.turn = self.steps.open(start, self.items)
        self.status = "processing"
        self._next_turn = self.turn  # the loop runs it: a task switch, not a new task
        self.wake.set()

    async def _run_turn(self, turn: RunningTurn) -> None:
        """Perform the turn's steps as the machine gives them, up to its commit."""
        assert turn.start is not None
        self._step = lc.PLAN
        while not isinstance(step := self._step, lc.Commit):
            self._step = None
            if isinstance(step, lc.Plan):
                if not self.room.has_room():  # the turn begins only with its record
                    await self.room.wait(self.queue)
                self._apply(self.steps.plan(turn))
            elif isinstance(step, lc.CallEngine):
                self.status = "streaming"
                self._apply(await self.steps.call_engine(turn))
            elif isinstance(step, lc.Compact):
                done = await self._compact(step.trigger)
                if done is not None and turn.overflowed_call is not None:
                    turn.event("llm", turn.overflowed_call)
                turn.overflowed_call = None
                self._apply(lc.Compacted(done is not None))
            else:
                raise lc.IllegalTransition(f"turn {turn.id} was left with no next step")
        for dropped in turn.start.dropped_note:  # named in this turn's note; done with now
            self.items.pop(dropped.id, None)
        self.status = "completing"
        with anyio.CancelScope(shield=True):
            outcome = await self.steps.commit(turn)
        self.turn, self.status, self._step = None, "idle", None
        self.ports.turn_ended()
        taken = tuple(i.id for i in turn.taken)
        if outcome != "aborted" or turn.abort_reason == "stop":
            for item_id in (*(i.id for i in turn.inputs), *taken):
                self.items.pop(item_id, None)
        self.post(lc.TurnCommitted(outcome, taken))

    async def _compact(
        self, trigger: lc.Trigger, instructions: str | None = None
    ) -> compactor.Compaction | None:
        previous, self.status = self.status, "compacting"
        try:
            return await self.steps.compact(trigger, instructions)
        finally:
            self.status = previous

    async def _manual_compaction(self) -> None:
        requests, self.compact_requests = self.compact_requests, []
        done = await self._compact("manual", requests[-1].instructions if requests else None)
        for request in requests:
            request.turn = done.turn_id if done is not None else None
            request.done.set()
        self.post(lc.Compacted(done is not None))
