"""One turn in flight: the engine's TurnIO, and what the turn carries to its commit.

Deltas go out as they come, never waited on (deliveries.py), and the turn keeps them:
an aborted turn commits what it said. A turn that streams for longer than
`engine.progress_save_s` saves its output so far at the first delta of each period
after its start (ledger/turns.py); a quick turn never saves. The save waits for room
in the ledger's queue of writes, and so holds up the stream (backpressure reaches the
engine). Every engine call gets its own cancel scope, bounded by the engine timeout;
an abort cancels the call in progress, or the next one before it starts.

The turn's events are numbered as they happen and written while it runs, at most one
write of them under way (core/turn_events.py); events that come meanwhile are sent by
a task that awaits that write (never by the ledger writer's task): the engine's events
as it reports them, an `action` for each tool call, and with the first of them its
`intent`. Each engine call ends with an `llm` event, unless the engine reported its
own model calls; those and the turn's `error` go with the commit. Events are written
only while the ledger's queue of writes has room; else that task first waits for room,
and if none comes in time they go with the turn's next write, or its commit.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio

from broker.engines.base import Engine, EngineError
from broker.observe import hub
from core import queue_machine as m
from core import turn_events as te
from core.engine_types import ChatMessage, EngineResult, TurnRequest
from core.lifecycle import save_due
from core.packing import ContextPlan, Msg
from core.snapshots import bad_file_event
from ledger.port.errors import WriterClosed, WriterOverloaded
from ledger.port.protocols import Committing
from ledger.port.records import ItemInfo
from plumbing import logs, redact
from plumbing.ids import new_id, now_ms

log = logs.get("broker.actor")
WriteEvents = Callable[[int, list[te.Event]], "Committing[None] | None"]
Admit = Callable[[], Awaitable[None]]  # the ledger's wait for room (ledger/port/protocols.py)
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]  # a task group's start_soon
TIMEOUT = "the agent took too long to answer and was stopped"


@dataclass
class RunningTurn:
    id: str
    turn_no: int
    out_id: str
    session: str
    channel: str | None
    send_delta: Callable[[str, str, dict[str, Any]], None]
    tools: Callable[[str, dict[str, Any], str], Awaitable[str]] | None = None
    start: m.StartTurn | None = None
    inputs: list[ItemInfo] = field(default_factory=list)
    scope: anyio.CancelScope | None = None  # the engine call in progress, if any
    abort_reason: str | None = None
    input_msgs: list[Msg] = field(default_factory=list)  # counted once, stored with the turn
    steer_queue: list[ItemInfo] = field(default_factory=list)
    taken: list[ItemInfo] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    started_ms: int = 0  # set when the turn begins, after any compaction (lifecycle)
    hint_checked: bool = False  # the recall hint is looked for once, before the first call
    snapshot_taken: bool = False  # its turn-start snapshot, once, before the first call
    # Looked up once when the turn opens (turn_steps.py): the same for all of it.
    engine: Engine | None = None
    model: str | None = None
    window: int = 0
    system: str | None = None
    notes: tuple[str, ...] = ()
    scratchpad: tuple[str, ...] = ()  # its renderings (core/scratchpad.py)
    plan: ContextPlan | None = None
    # The outcome so far: the engine's result, or an error and its reason.
    result: EngineResult | None = None
    error: str | None = None
    reason: str | None = None
    overflowed_call: dict[str, Any] | None = None  # kept if a reactive compaction follows
    # The engine's id of each broker tool call -> the broker's (broker/tools/table.py);
    # made at the first call: most turns call no tool.
    call_ids: dict[str, str] | None = None
    # `save_progress` runs at the first delta of each `save_every_s` after the
    # turn starts; `progress_saved` tells the commit a saved row may exist.
    clock: Callable[[], float] = anyio.current_time
    save_every_s: float = math.inf
    save_progress: Callable[[RunningTurn], Awaitable[None]] | None = None
    progress_saved: bool = False
    save_due: float = field(init=False)
    # every event of the turn, and how to write some (None: only at the commit),
    # when the ledger has room for them.
    events: te.EventLog = field(default_factory=lambda: te.EventLog([]))
    write_events: WriteEvents | None = None
    has_room: Callable[[], bool] = lambda: True
    admit: Admit | None = None
    # The write under way and its first event; a task of the actor's group (`spawn`)
    # awaits it when more events wait behind it.
    events_writing: Committing[None] | None = None
    events_first: int = 0
    events_follow_up: bool = False
    spawn: Spawn | None = None
    call_began: float | None = None  # the engine call's start, until its first chunk

    def __post_init__(self) -> None:
        self.save_due = self.clock() + self.save_every_s

    async def delta(self, text: str) -> None:
        if self.call_began is not None:  # the call's first chunk
            hub.observer.first_chunk(self.clock() - self.call_began)
            self.call_began = None
        hub.observer.delta(self.session, self.id, text)
        self.parts.append(text)
        if self.channel is not None:
            self.send_delta(
                self.channel,
                self.session,
                {"type": "delta", "out_id": self.out_id, "session": self.session, "text": text},
            )
        if self.save_progress is not None:
            next_due = save_due(self.save_due, self.clock(), self.save_every_s)
            if next_due is not None:
                self.save_due = next_due
                await self.save_progress(self)

    def take_steer(self) -> list[ChatMessage]:
        taken, self.steer_queue = self.steer_queue, []
        self.taken.extend(taken)
        return [as_chat(it) for it in taken]

    def event(self, kind: str, data: dict[str, Any]) -> None:
        """An event of the turn, written soon."""
        self.events.add(kind, data)
        self.flush_events()

    def flush_events(self) -> None:
        """What waits goes out now; while a write of them is under way, a task
        awaits it and then sends what waits (one such task at a time)."""
        log_, writing = self.events, self.events_writing
        if writing is not None:
            if not writing.done:
                if not self.events_follow_up and log_.waiting and self.spawn is not None:
                    self.events_follow_up = True
                    self.spawn(self._after_write)
                return
            self._written(writing)
        if self.write_events is None or not te.flush_due(log_):
            return
        if not self.has_room():  # a task waits for room, then sends them
            if not self.events_follow_up and self.spawn is not None:
                self.events_follow_up = True
                self.spawn(self._after_write)
            return
        first = log_.sent
        writing = self.write_events(first, log_.events[first:])
        if writing is None:  # the writer refused them for now: they go with the next
            return
        log_.sent, log_.in_flight = len(log_.events), True
        self.events_writing, self.events_first = writing, first

    def _written(self, writing: Committing[None]) -> None:
        log_ = self.events
        self.events_writing, log_.in_flight = None, False
        try:
            writing.get()
        except Exception as exc:
            if not log_.closed:
                log_.sent = self.events_first  # one write at a time: the only ones unwritten
            log.warning(
                "turn events not written", session=self.session, turn=self.id, error=str(exc)
            )

    async def _after_write(self) -> None:
        writing = self.events_writing
        if writing is not None:
            await writing.wait()
        if not self.has_room() and self.admit is not None:
            try:
                await self.admit()
            except (WriterOverloaded, WriterClosed):
                self.events_follow_up = False
                return  # no room in time: they go with the next write, or the commit
        self.events_follow_up = False
        if not self.events.closed:
            self.flush_events()

    async def call_tool(
        self, name: str, arguments: dict[str, Any], call_id: str | None = None
    ) -> str:
        started, began_ms = self.clock(), now_ms()
        status, error = "ok", None
        try:
            if self.tools is None:
                raise EngineError(f"the broker offers no tool named {name!r}")
            ours = new_id()
            if call_id:
                if self.call_ids is None:
                    self.call_ids = {}
                self.call_ids[call_id] = ours
            return await self.tools(name, arguments, ours)
        except EngineError as exc:
            status, error = "error", str(exc)
            raise
        finally:
            ms = round((self.clock() - started) * 1000)
            self.event("action", te.action_payload(name, status, ms, error))
            hub.observer.tool_call(self.id, name, began_ms, began_ms + ms, status)

    def abort(self, reason: str) -> None:
        self.abort_reason = reason
        if self.scope is not None:
            self.scope.cancel()

    async def call(self, engine: Engine, request: TurnRequest, deadline: float) -> bool:
        """Call the engine once and keep its outcome; did the context overflow
        before any output (a reactive compaction may help)?"""
        self.result, self.error, self.reason = None, None, None
        began, calls_before = now_ms(), self.events.engine_calls
        self.call_began = self.clock()
        # One scope for both the timeout and an abort: cheaper than nesting fail_after.
        with self.engine_scope(deadline) as scope:
            try:
                self.result = await engine.run(request, self)
            except TimeoutError:  # the engine's own (say, an HTTP client's)
                self.error, self.reason = TIMEOUT, "timeout"
            except EngineError as exc:  # an engine's message may quote its key or URL
                self.error, self.reason = redact.text(str(exc)), exc.reason
            except Exception as exc:
                log.exception("engine crashed", session=self.session, turn=self.id)
                self.error, self.reason = f"the agent failed ({type(exc).__name__})", "engine"
        if self.result is not None:
            for kind, data in self.result.events:  # an engine that reports at the end
                self.events.add(kind, data)
        if scope.cancelled_caught:
            if self.abort_reason is None:  # cancelled, but not by an abort: the deadline
                self.error, self.reason = TIMEOUT, "timeout"
            else:
                self.reason = self.abort_reason  # aborted by the machine
        elif self.result is not None and (problem := bad_file_event(self.events.events)):
            # A change the ledger cannot record must not pass for a completed turn.
            self.error = f"The agent reported a file change the broker cannot record: {problem}"
            self.reason = "bad_event"
        ended = now_ms()
        self.call_began = None
        hub.observer.engine_call(self.id, began, ended)
        if self.reason != "context_overflow" or self.parts:
            if self.events.engine_calls == calls_before:  # the broker's record of it
                self.events.events.append(("llm", self._call_payload(ended - began)))
            return False
        self.overflowed_call = {
            **self._call_payload(ended - began),
            "outcome": "context_overflow",
            "error": self.error,
            "started_at": self.started_ms,
            "ended_at": ended,
        }
        return True

    def _call_payload(self, duration_ms: int) -> dict[str, Any]:
        result = self.result
        return te.llm_payload(
            (result.model if result is not None else None) or self.model,
            result.prompt_tokens if result is not None else None,
            result.completion_tokens if result is not None else None,
            duration_ms,
            te.stop_reason("completed" if self.error is None and result else "failed", self.reason),
        )

    def refuse(self) -> None:
        """Its inputs do not fit the context window: it fails without an engine call."""
        assert self.plan is not None
        self.result, self.reason = None, "context_overflow"
        self.error = (
            f"The message is too long for this agent's context window "
            f"({self.plan.tokens} tokens of {self.plan.budget})."
        )

    def engine_scope(self, deadline: float) -> anyio.CancelScope:
        """A fresh scope for one engine call, cancelled already if the turn
        was aborted before the call."""
        self.scope = anyio.CancelScope(deadline=deadline)
        if self.abort_reason is not None:
            self.scope.cancel()
        return self.scope


def as_chat(item: ItemInfo) -> ChatMessage:
    return ChatMessage(
        "user", item.content, name=item.sender_name, msg_id=item.msg_id, item_id=item.id
    )
