"""A session's mailbox actor: the I/O shell around the pure queue-mode machine.

Rule 1: one actor per live session (the registry guarantees it), and the
        actor runs at most one turn at a time: it starts a turn only on the
        machine's StartTurn, which the machine emits only while no turn runs,
        and the actor's own loop runs the turn, so there is one place a turn
        can run. Only a turn calls the engine.
Rule 2: everything reaches the actor as an event in its own queue, handled one
        at a time in arrival order: new items, turn ends, timers, commands. Once
        the actor runs, `post` handles the queue at once, in the poster's task
        (it is synchronous and never awaits, so it cannot interleave with the
        loop); the loop wakes only for timers, idleness and a failure.
Rule 3: a turn is durable at both ends: its items are marked running before
        the engine is called, and its outcome is committed in one transaction
        (ledger/turns.py) before the reply is sent.
Rule 4: every wait on the engine is bounded by `engine.timeout_s`; an abort
        cancels the turn's own scope; a shutdown leaves the turn uncommitted,
        for crash recovery to record and re-run at the next start.
Rule 5: a turn that streams for longer than `engine.progress_save_s` saves its
        output so far that often, at a delta (ledger/turns.py Rule 4). A save
        is queued behind the turn's `mark_running` and ahead of its commit, and
        nobody waits on it: a quick turn never saves, a slow one pays a write a
        period, and a save that cannot be queued is skipped, not an error.
Rule 6: a turn starts (`started_at`, the items' running mark) only after any
        compaction it needs is committed, so no two turns of a session overlap
        in the ledger's times (docs/turns.md). After a reactive compaction it
        starts again: the engine call that overflowed is one of its events,
        with its own times, not part of the turn's span.
"""

from __future__ import annotations

import math
import sqlite3
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import anyio
import orjson

from broker import tools
from broker.context.session import SessionContext, summary_text
from broker.context.session import load as load_context
from broker.core import queue_machine as m
from broker.core.compaction import compaction_due
from broker.core.engine_types import ChatMessage, EngineResult, HistoryMessage, TurnRequest
from broker.core.packing import ContextPlan, Msg
from broker.engines.base import Engine, EngineError
from ledger import logs
from ledger import turns as lt
from ledger.ids import new_id, now_ms
from ledger.items import ItemInfo
from ledger.turns import TurnRecord
from ledger.writer import WriterClosed, WriterOverloaded

from . import compactor
from .commands import Command, is_command

if TYPE_CHECKING:
    from .registry import Mailboxes

log = logs.get("broker.actor")
ActorState = Literal["idle", "processing", "streaming", "compacting", "completing"]
SOURCES: dict[str, m.Source] = {s: s for s in ("person", "worker", "timer", "operator")}


@dataclass
class RunningTurn:
    """One turn in flight; also the engine's TurnIO."""

    id: str
    turn_no: int
    out_id: str
    session: str
    channel: str | None
    send_delta: Callable[[str, str, dict[str, Any]], None]
    tools: Callable[[str, dict[str, Any]], Awaitable[str]] | None = None
    scope: anyio.CancelScope | None = None  # the engine call in progress, if any
    abort_reason: str | None = None
    input_msgs: list[Msg] = field(default_factory=list)  # counted once, stored with the turn
    steer_queue: list[ItemInfo] = field(default_factory=list)
    taken: list[ItemInfo] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    started_ms: int = 0  # set when the turn starts, after any compaction (Rule 6)
    # Engine calls before the compaction that preceded the turn's start (Rule 6).
    earlier_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # Rule 5: `save_progress` runs at the first delta of each `save_every_s` after the
    # turn starts; `progress_saved` tells the commit a saved row may exist.
    clock: Callable[[], float] = anyio.current_time
    save_every_s: float = math.inf
    save_progress: Callable[[RunningTurn], None] | None = None
    progress_saved: bool = False
    save_due: float = field(init=False)

    def __post_init__(self) -> None:
        self.save_due = self.clock() + self.save_every_s

    async def delta(self, text: str) -> None:
        self.parts.append(text)
        if self.channel is not None:
            self.send_delta(
                self.channel,
                self.session,
                {"type": "delta", "out_id": self.out_id, "session": self.session, "text": text},
            )
        if self.save_progress is not None:
            now = self.clock()
            if now >= self.save_due:
                self.save_due = now + self.save_every_s
                self.save_progress(self)

    def take_steer(self) -> list[ChatMessage]:
        taken, self.steer_queue = self.steer_queue, []
        self.taken.extend(taken)
        return [as_chat(it) for it in taken]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if self.tools is None:
            raise EngineError(f"the broker offers no tool named {name!r}")
        return await self.tools(name, arguments)

    def abort(self, reason: str) -> None:
        self.abort_reason = reason
        if self.scope is not None:
            self.scope.cancel()

    def engine_scope(self, deadline: float) -> anyio.CancelScope:
        """A fresh scope for one engine call (a turn may call twice, after a reactive
        compaction), bounded by the engine timeout's deadline; cancelled already if the
        turn was aborted before the call."""
        self.scope = anyio.CancelScope(deadline=deadline)
        if self.abort_reason is not None:
            self.scope.cancel()
        return self.scope


def _route_of(item: ItemInfo) -> lt.Route:
    assert item.channel is not None
    return (item.channel, item.peer_kind, item.peer_id, item.thread_id)


@dataclass
class CompactRequest:
    """Manual compaction (`/compact`, `session.compact`), run between turns."""

    instructions: str | None
    done: anyio.Event = field(default_factory=anyio.Event)
    turn: str | None = None


def turn_events(
    result: EngineResult | None, status: str, error: str | None
) -> list[tuple[str, dict[str, Any]]]:
    """The engine's events, then the broker's own: one `action` per tool call, one
    `llm` for the model call, and an `error` for a failed turn."""
    events = list(result.events) if result is not None else []
    if result is not None:
        events += [("action", {"tool": c.name, "status": c.status}) for c in result.tool_calls]
        events.append(
            (
                "llm",
                {
                    "model": result.model,
                    "prompt_tokens": result.prompt_tokens,
                    "completion_tokens": result.completion_tokens,
                },
            )
        )
    if status == "failed":
        events.append(("error", {"text": error or "the turn failed"}))
    return events


def as_chat(item: ItemInfo) -> ChatMessage:
    return ChatMessage(
        "user", item.content, name=item.sender_name, msg_id=item.msg_id, item_id=item.id
    )


class SessionActor:
    def __init__(self, label: str, hub: Mailboxes) -> None:
        self.label = label
        self.hub = hub
        self.items: dict[str, ItemInfo] = {}
        self.queue: deque[ItemInfo | m.Event | Command | CompactRequest] = deque()
        self.compacting = False  # a manual compaction runs; turns wait for it
        self.deferred: m.StartTurn | None = None
        self.compact_requests: list[CompactRequest] = []
        self.wake = anyio.Event()
        self.status: ActorState = "idle"
        self.turn: RunningTurn | None = None
        self.deadline: float | None = None
        self.head: str | None = None
        self.persona: str | None = None
        self.override: dict[str, Any] = {}
        self.turn_count = 0
        self.kind = "dm"
        self.route: lt.Route | None = None  # where replies go when a turn has no inbound
        self.tokens = [0, 0]  # prompt, completion: running totals of this session
        self.ctx = SessionContext(hub.counter)
        self.pending_new = False
        self.state = m.State(limits=self.limits())
        self._tg: anyio.abc.TaskGroup | None = None
        self.clock = hub.clock
        self._last_activity = self.clock()
        self._live = False  # the loop runs: `post` may handle events at once
        self._draining = False  # `_drain` is on the stack: a nested post just queues
        self._wake_by = math.inf  # when the sleeping loop wakes by itself
        self._failure: Exception | None = None  # raised by an inline drain, for the loop
        self._next_turn: tuple[m.StartTurn, list[ItemInfo], RunningTurn] | None = None

    # -- feeding the actor (synchronous, never blocks) -------------------------

    def post(self, event: ItemInfo | m.Event | Command | CompactRequest) -> None:
        self.queue.append(event)
        if self._draining:
            return  # the drain on the stack takes it next
        if not self._live:
            self.wake.set()
            return
        # Handled here rather than by waking the loop: one task switch and one
        # timer less per message.
        try:
            self._drain()
        except Exception as exc:  # the loop raises it: the actor fails and is restarted
            self._failure = exc
            self.wake.set()
            return
        if self._due() < self._wake_by:
            self.wake.set()

    @property
    def backlog(self) -> int:
        return len(self.state.backlog)

    # -- the loop --------------------------------------------------------------

    async def run(self, backlog: list[ItemInfo] | None) -> None:
        """Run until idle. `backlog=None`: recover the session from the ledger first."""
        if backlog is None:
            backlog = await self.hub.recover_session(self.label)
        # An earlier actor of this session may have retired with writes not yet
        # committed (a `/new`, a `/queue` override): load only after them.
        await self.hub.ledger.writer.settled()
        await self._load()
        # A chat command cut off between its ack and its reply is still a command.
        commands = [i for i in backlog if i.source == "person" and is_command(i.text or "")]
        backlog = [i for i in backlog if i not in commands]
        for item in (*backlog, *commands):
            self.items[item.id] = item
        # Items posted while loading may also be in the recovered backlog.
        self.queue = deque(
            e for e in self.queue if not (isinstance(e, ItemInfo) and e.id in self.items)
        )
        self.state = m.State.initial(self.limits(), [self._machine_item(i) for i in backlog])
        async with anyio.create_task_group() as tg:
            self._tg = tg
            for command in commands:
                self.items.pop(command.id, None)
                self.hub.chat_command(self, command)
            self._apply(m.Resume())
            self._live = True
            try:
                await self._loop()
            finally:
                self._live = False

    async def _loop(self) -> None:
        idle_s = self.hub.settings.queue.idle_stop_s
        # `post` wakes the loop when what it handled makes work due sooner (see
        # `_due`); as a safety net the loop also looks again at least this often.
        recheck_s = max(idle_s, 0.05)
        while True:
            if self._failure is not None:
                raise self._failure
            if self._next_turn is not None:
                # While it runs nothing needs the loop: events are handled by `post`,
                # and no collect deadline is armed during a turn (machine Rule 6).
                start, inputs, turn = self._next_turn
                self._next_turn = None
                await self._run_turn(start, inputs, turn)
                continue
            if not self.wake.is_set():
                now = self.clock()
                self._wake_by = min(self._due(), now + recheck_s)
                with anyio.move_on_after(max(0.0, self._wake_by - now)):
                    await self.wake.wait()
                self._wake_by = -math.inf  # awake: posts need not wake us
            self.wake = anyio.Event()
            self._drain()
            if self._timer_due():
                self._apply(m.Tick())
            if self._quiet() and not self.wake.is_set() and self._idle_long(idle_s):
                self.hub.retire(self)
                return

    def _due(self) -> float:
        """When the loop has work: the collect deadline or, when quiet, the idle
        deadline (infinity when neither)."""
        due = math.inf if self.deadline is None else self.deadline
        if self._quiet():
            due = min(due, self._last_activity + self.hub.settings.queue.idle_stop_s)
        return due

    def _timer_due(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    def _quiet(self) -> bool:
        return (
            self.turn is None
            and not self.compacting
            and not self.compact_requests
            and not self.state.backlog
            and not self.queue
            and self.state.running is None
        )

    def _idle_long(self, idle_s: float) -> bool:
        return self.clock() - self._last_activity >= idle_s

    def _drain(self) -> None:
        if not self.queue:
            return
        self._last_activity = self.clock()
        self._draining = True
        try:
            while self.queue:
                event = self.queue.popleft()
                if isinstance(event, ItemInfo):
                    self._arrived(event)
                elif isinstance(event, Command):
                    self.apply_command(event)
                elif isinstance(event, CompactRequest):
                    self.compact_requests.append(event)
                    self._maybe_compact()
                else:
                    self._apply(event)
        finally:
            self._draining = False

    # -- the machine -----------------------------------------------------------

    def limits(self) -> m.Limits:
        q = self.hub.settings.queue
        return m.Limits(
            debounce_s=self.override.get("debounce_ms", q.debounce_ms) / 1000,
            cap=self.override.get("cap", q.cap),
            drop=self.override.get("drop", q.drop),
        )

    def _machine_item(self, item: ItemInfo) -> m.Item:
        source = SOURCES.get(item.source, "operator")
        route_default: m.QueueMode | None = None
        if source == "person" and item.channel and item.sender_id and item.peer_kind:
            decision = self.hub.router.decision(item.channel, item.peer_kind, item.sender_id)
            route_default = decision.default_mode or self.hub.settings.queue.person_mode
        elif source in ("worker", "timer"):
            route_default = self.hub.settings.queue.worker_mode
        try:
            mode = m.resolve_mode(item.mode, None, self.override.get("mode"), route_default, source)
        except m.ModeRefused:
            mode = m.resolve_mode(None, None, self.override.get("mode"), route_default, source)
        return m.Item(item.id, item.seq, mode, source)

    def _apply(self, event: m.Event) -> None:
        try:
            self.state, actions = m.handle(self.state, event, self.clock())
        except m.IllegalTransition:
            log.exception("illegal queue transition", session=self.label, event=repr(event))
            return
        for action in actions:
            self._act(action)

    def _act(self, action: m.Action) -> None:
        match action:
            case m.StartTurn():
                self._start_turn(action)
            case m.AbortTurn():
                if self.turn is not None and self.turn.turn_no == action.turn_no:
                    self.turn.abort(action.reason)
            case m.Steer():
                if self.turn is not None and self.turn.turn_no == action.turn_no:
                    self.turn.steer_queue.append(self.items[action.item.id])
            case m.Drop():
                self._drop(action)
            case m.WakeAt():
                self.deadline = action.deadline

    def _arrived(self, item: ItemInfo) -> None:
        if item.channel is not None:
            self.route = _route_of(item)
        if item.source == "person" and is_command(item.text or ""):
            self.hub.chat_command(self, item)
            return
        self.items[item.id] = item
        steerable = self.engine.accepts_steering
        self._apply(m.Arrived(self._machine_item(item), steerable=steerable))

    def apply_command(self, command: Command) -> None:
        if command.name == "stop":
            self._apply(m.Stop())
        elif command.name == "queue":
            self.override = dict(command.override or {})
            self._apply(m.Configure(self.limits()))
        elif command.name == "compact":
            self.post(CompactRequest(command.args or None))
        elif command.name == "new":
            self.pending_new = True
            if self.turn is None:
                self._new_thread()

    def _new_thread(self) -> None:
        self.pending_new = False
        previous, self.head = self.head, None
        self.ctx.reset()
        label, now = self.label, now_ms()
        self.hub.ledger.writer.submit(lt.new_thread, label, previous, now)

    def _drop(self, action: m.Drop) -> None:
        if action.reason == "cap:summarize":  # named in the next turn's note: keep it till then
            item = self.items.get(action.item.id)
        else:
            item = self.items.pop(action.item.id, None)
        if action.reason == "stopped":
            return  # the stopped turn's commit recorded it as cancelled
        now = now_ms()
        self.hub.ledger.writer.submit(
            lt.set_item_status, [(action.item.id, "dropped", action.reason)], now
        )
        log.info(
            "item dropped",
            session=self.label,
            item=action.item.id,
            reason=action.reason,
            msg_id=item.msg_id if item else None,
        )

    # -- turns -----------------------------------------------------------------

    def _start_turn(self, start: m.StartTurn) -> None:
        assert self.turn is None, "two turns of one session at once"
        assert self._tg is not None
        if self.hub.draining:
            return  # shutting down: the items stay queued in the ledger for the next start
        if self.compacting:
            self.deferred = start  # runs when the compaction ends
            return
        if self.pending_new:
            self._new_thread()
        inputs = [self.items[i.id] for i in start.items]
        channel = next((i.channel for i in reversed(inputs) if i.channel), None)
        if channel is None and self.route is not None:
            channel = self.route[0]  # a turn with no inbound (a worker result) answers here
        turn_id, label, hub = new_id(), self.label, self.hub
        self.turn = RunningTurn(
            turn_id,
            start.turn_no,
            new_id(),
            label,
            channel,
            hub.deliveries.delta,
            tools=lambda name, args: tools.call(hub, label, turn_id, name, args),
            clock=self.clock,
            save_every_s=hub.settings.engine.progress_save_s,
            save_progress=self._save_progress,
        )
        self.status = "processing"
        # The loop runs it: a task switch instead of a new task per turn.
        self._next_turn = (start, inputs, self.turn)
        self.wake.set()

    def _save_progress(self, turn: RunningTurn) -> None:
        """Queue a save of `turn`'s output so far (Rule 5)."""
        try:
            self.hub.ledger.writer.submit(
                lt.save_progress, turn.id, self.label, "".join(turn.parts), now_ms()
            )
        except (WriterOverloaded, WriterClosed) as exc:
            log.warning(
                "partial output not saved", session=self.label, turn=turn.id, error=str(exc)
            )
            return
        turn.progress_saved = True

    async def _run_turn(
        self, start: m.StartTurn, inputs: list[ItemInfo], turn: RunningTurn
    ) -> None:
        ids = [i.id for i in inputs]
        # Made with the turn's id: they become its history block as they are.
        turn.input_msgs = [self.ctx.msg("user", i.content, i.sender_name, turn.id) for i in inputs]
        result, error, reason = await self._prepare_and_call(start, inputs, turn)
        started = turn.started_ms
        parent = self.head  # after any compaction this turn ran first
        for dropped in start.dropped_note:  # named in this turn's note; done with now
            self.items.pop(dropped.id, None)
        self.status = "completing"
        with anyio.CancelScope(shield=True):
            outcome = await self._commit(
                start, inputs, turn, parent, started, result, error, reason
            )
        self.turn = None
        self.status = "idle"
        self.hub.turn_ended()
        self._maybe_compact()
        taken = tuple(i.id for i in turn.taken)
        for item_id in (*ids, *taken):
            if outcome != "aborted" or turn.abort_reason == "stop":
                self.items.pop(item_id, None)
        self.post(m.TurnEnded(start.turn_no, outcome, taken))

    def _begin(self, turn: RunningTurn, inputs: list[ItemInfo]) -> None:
        """The turn starts now: any compaction it needed is committed (Rule 6)."""
        turn.started_ms = now_ms()
        # Not awaited: the writer is FIFO, so this commits before the turn's own
        # commit. If the process dies first, the items are simply still queued.
        ids = [i.id for i in inputs]
        self.hub.ledger.writer.submit(lt.mark_running, turn.id, ids, turn.started_ms)

    def _maybe_compact(self) -> None:
        if self.compact_requests and self.turn is None and not self.compacting:
            assert self._tg is not None
            requests, self.compact_requests = self.compact_requests, []
            self.compacting = True
            self._tg.start_soon(self._run_manual_compaction, requests)

    async def _run_manual_compaction(self, requests: list[CompactRequest]) -> None:
        try:
            turn = await compactor.compact(self, "manual", requests[-1].instructions)
        finally:
            self.compacting = False
        for request in requests:
            request.turn = turn
            request.done.set()
        self.wake.set()  # reconsider: maybe idle now
        if self.deferred is not None:
            start, self.deferred = self.deferred, None
            self._start_turn(start)

    @property
    def engine(self) -> Engine:
        """The engine of this session's persona, else the default engine."""
        return self.hub.engine_for(self.persona)

    def window(self) -> int:
        persona = self.hub.settings.personas.get(self.persona or "")
        return (
            persona.context_window
            if persona and persona.context_window
            else self.engine.context_window
        )

    async def _prepare_and_call(
        self, start: m.StartTurn, inputs: list[ItemInfo], turn: RunningTurn
    ) -> tuple[EngineResult | None, str | None, str | None]:
        """Assemble within the budget (compacting first when due), call the engine, and
        on a context overflow compact and try once more (Rule 6)."""
        for attempt in ("first", "after reactive compaction"):
            plan = self._plan(start, turn)
            if plan.compaction_due and await compactor.compact(self, "proactive"):
                plan = self._plan(start, turn)
            self._begin(turn, inputs)
            if plan.over_budget:
                return (
                    None,
                    (
                        f"The message is too long for this agent's context window "
                        f"({plan.tokens} tokens of {plan.budget})."
                    ),
                    "context_overflow",
                )
            request = self._request(turn, start, inputs, plan)
            result, error, reason = await self._call_engine(request, turn)
            if result is not None:
                self.ctx.last_reported = result.prompt_tokens
            if reason != "context_overflow" or turn.parts or attempt != "first":
                return result, error, reason
            overflowed = {
                "outcome": "context_overflow",
                "error": error,
                "started_at": turn.started_ms,
                "ended_at": now_ms(),
            }
            if not await compactor.compact(self, "reactive"):
                return result, error, reason
            turn.earlier_calls.append(("llm", overflowed))
        return result, error, reason

    def _plan(self, start: m.StartTurn, turn: RunningTurn) -> ContextPlan:
        cfg = self.hub.settings.engine
        system = self._system_prompt()
        notes = tuple(self.ctx.msg("system", n) for n in self._notes(start))
        plan = self.ctx.build(
            window=self.window(),
            reserve=cfg.reserve_reply_tokens,
            threshold=cfg.compaction_threshold,
            system=self.ctx.fixed("system", system) if system else None,
            inputs=tuple(turn.input_msgs),
            notes=notes,
        )
        reported = self.ctx.last_reported
        if (
            reported is not None
            and not plan.compaction_due
            and self.ctx.blocks
            and compaction_due(plan.tokens, self.window(), cfg.compaction_threshold, reported)
        ):
            return replace(plan, compaction_due=True)  # a copy only when it changes
        return plan

    def _system_prompt(self) -> str | None:
        settings = self.hub.settings
        persona = settings.personas.get(self.persona or "")
        prompt = persona.system_prompt if persona else None
        if prompt is None and self.kind == "worker":
            prompt = settings.workers.system_prompt
        return prompt

    def _notes(self, start: m.StartTurn) -> tuple[str, ...]:
        if not start.dropped_note:
            return ()
        dropped = [self.items.get(i.id) for i in start.dropped_note]
        listed = "; ".join((d.content[:80] if d else "?") for d in dropped)
        return (
            f"{len(start.dropped_note)} earlier message(s) were dropped because the "
            f"queue was full: {listed}",
        )

    def _request(
        self, turn: RunningTurn, start: m.StartTurn, inputs: list[ItemInfo], plan: ContextPlan
    ) -> TurnRequest:
        persona = self.hub.settings.personas.get(self.persona or "")
        state = self.ctx.state.render()
        head: tuple[HistoryMessage, ...] = (ChatMessage("system", state),) if state else ()
        if self.ctx.summary:
            head += (ChatMessage("system", summary_text(self.ctx.summary)),)
        history = head + plan.history
        return TurnRequest(
            session=self.label,
            turn_id=turn.id,
            system_prompt=self._system_prompt(),
            model=persona.model if persona else None,
            tools=tools.SPECS,
            history=history,
            inputs=tuple(as_chat(i) for i in inputs),
            notes=self._notes(start),
        )

    async def _call_engine(
        self, request: TurnRequest, turn: RunningTurn
    ) -> tuple[EngineResult | None, str | None, str | None]:
        self.status = "streaming"
        engine = self.engine
        # One scope for both the timeout and an abort: cheaper than nesting fail_after.
        with turn.engine_scope(self.clock() + self.hub.settings.engine.timeout_s):
            try:
                return await engine.run(request, turn), None, None
            except TimeoutError:  # the engine's own (say, an HTTP client's)
                return None, "the agent took too long to answer and was stopped", "timeout"
            except EngineError as exc:
                return None, str(exc), exc.reason
            except Exception as exc:
                log.exception("engine crashed", session=self.label, turn=turn.id)
                return None, f"the agent failed ({type(exc).__name__})", "engine"
        if turn.abort_reason is None:  # cancelled, but not by an abort: the deadline
            return None, "the agent took too long to answer and was stopped", "timeout"
        return None, None, turn.abort_reason  # aborted by the machine

    async def _commit(
        self,
        start: m.StartTurn,
        inputs: list[ItemInfo],
        turn: RunningTurn,
        parent: str | None,
        started: int,
        result: EngineResult | None,
        error: str | None,
        reason: str | None,
    ) -> m.Outcome:
        all_inputs = inputs + turn.taken
        outcome: m.Outcome
        status: Literal["completed", "aborted", "failed"]
        if turn.abort_reason is not None and result is None and error is None:
            outcome, status = "aborted", "aborted"
            item_status: lt.ItemStatus = "cancelled" if turn.abort_reason == "stop" else "queued"
        elif error is not None:
            outcome, status, item_status = "failed", "failed", "done"
        else:
            outcome, status, item_status = "completed", "completed", "done"
        if result is not None and result.steer_used is not None:
            # Steered items the engine took but did not use run in the next
            # turn. Only a prefix can count: a used item after an unused one
            # would run ahead of it, so it runs again, in order, instead.
            used = set(result.steer_used)
            prefix = 0
            while prefix < len(turn.taken) and turn.taken[prefix].id in used:
                prefix += 1
            turn.taken = turn.taken[:prefix]
        text = result.text if result is not None else "".join(turn.parts)
        reply = error if status == "failed" else text
        # Each message is counted once: for the ledger and for the in-memory history.
        taken_msgs = [self.ctx.msg("user", i.content, i.sender_name, turn.id) for i in turn.taken]
        reply_msg = self.ctx.msg("assistant", text, turn_id=turn.id) if text else None
        rec = TurnRecord(
            turn_id=turn.id,
            session=self.label,
            parent_id=parent,
            type=start.kind,
            status=status,
            reason=reason,
            error=error,
            output=text,
            engine=self.engine.name,
            model=result.model if result else None,
            started_at=started,
            completed_at=now_ms(),
            prompt_tokens=result.prompt_tokens if result else None,
            completion_tokens=result.completion_tokens if result else None,
            inputs=all_inputs,
            item_status=item_status,
            item_reason="stopped" if item_status == "cancelled" else None,
            tool_calls=result.tool_calls if result else [],
            outbox=self._outbox(turn, all_inputs, reply or "", status),
            input_tokens=[msg.tokens for msg in (*turn.input_msgs, *taken_msgs)],
            output_tokens=reply_msg.tokens if reply_msg else None,
            events=turn.earlier_calls + turn_events(result, status, error),
            progress_saved=turn.progress_saved,
        )
        written = await self.hub.commit(rec)
        if written != "lost":
            for kind, payload in rec.events:
                self.ctx.state.apply(kind, payload)
        log.info(
            "turn " + (status if written != "lost" else "lost"),
            session=self.label,
            turn=rec.turn_id,
            turn_type=rec.type,
            reason=rec.reason,
            msg_ids=[i.msg_id for i in all_inputs if i.msg_id],
            channel=turn.channel,
            ms=rec.completed_at - started,
            prompt_tokens=rec.prompt_tokens,
            completion_tokens=rec.completion_tokens,
        )
        if written != "lost":
            self.tokens[0] += rec.prompt_tokens or 0
            self.tokens[1] += rec.completion_tokens or 0
        if written == "thread":
            self.head = rec.turn_id
            self.turn_count += 1
            # The same rule as broker.context.session.load, so an actor that
            # starts later sees the same history: inputs unless the turn was
            # aborted (they run again), the reply when there is one.
            kept = [] if status == "aborted" else [*turn.input_msgs, *taken_msgs]
            if text or status == "completed":
                kept.append(reply_msg or self.ctx.msg("assistant", text, turn_id=turn.id))
            self.ctx.add_turn(rec.turn_id, kept)
        elif written == "orphan":
            outcome = "failed"
        return outcome

    def _outbox(
        self, turn: RunningTurn, inputs: list[ItemInfo], text: str, status: str
    ) -> tuple[str, str, str] | None:
        latest = next((i for i in reversed(inputs) if i.channel), None)
        route = _route_of(latest) if latest is not None else self.route
        if route is None:
            return None  # e.g. a worker: its reply goes to its parent as a result
        channel, peer_kind, peer_id, thread_id = route
        frame = {
            "type": "deliver",
            "out_id": turn.out_id,
            "session": self.label,
            "turn": turn.id,
            "peer_kind": peer_kind,
            "peer_id": peer_id,
            "thread_id": thread_id,
            "in_reply_to": [i.msg_id for i in inputs if i.msg_id is not None],
            "text": text,
            "status": "final" if status == "completed" else status,
        }
        return turn.out_id, channel, orjson.dumps(frame).decode()

    async def _load(self) -> None:
        label, counter = self.label, self.hub.counter

        def read(c: sqlite3.Connection) -> tuple[lt.ActorStart, SessionContext]:
            start = lt.actor_start(c, label)
            return start, load_context(c, start.head, counter)

        # One hop to a reader thread, not two: actors start by the thousand.
        start, self.ctx = await self.hub.ledger.read(read)
        self.head, self.persona, self.kind = start.head, start.persona, start.kind
        self.turn_count, self.tokens, self.route = start.turns, list(start.tokens), start.route
        self.override = orjson.loads(start.override) if start.override else {}
