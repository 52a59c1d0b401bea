"""One turn in flight: the engine's TurnIO, and what the turn carries to its commit.

Rule 1: deltas go out as they come, never waited on (deliveries.py), and the turn
        keeps them: an aborted turn commits what it said.
Rule 2: a turn that streams for longer than `engine.progress_save_s` saves its output
        so far at the first delta of each period after its start (ledger/turns.py
        Rule 4); a quick turn never saves.
Rule 3: every engine call gets its own cancel scope, bounded by the engine timeout; an
        abort cancels the call in progress, or the next one before it starts.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from broker.core import queue_machine as m
from broker.core.engine_types import ChatMessage, EngineResult, TurnRequest
from broker.core.lifecycle import save_due
from broker.core.packing import ContextPlan, Msg
from broker.core.snapshots import bad_file_event
from broker.engines.base import Engine, EngineError
from ledger import logs
from ledger.ids import new_id, now_ms
from ledger.items import ItemInfo

log = logs.get("broker.actor")
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
    started_ms: int = 0  # set when the turn begins, after any compaction (lifecycle Rule 2)
    # Engine calls before the compaction that preceded the turn's start (docs/turns.md).
    earlier_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    hint_checked: bool = False  # the recall hint is looked for once, before the first call
    # Looked up once when the turn opens (turn_steps.py): the same for all of it.
    engine: Engine | None = None
    model: str | None = None
    window: int = 0
    system: str | None = None
    notes: tuple[str, ...] = ()
    scratchpad: tuple[str, ...] = ()  # its renderings (broker/core/scratchpad.py)
    plan: ContextPlan | None = None
    # The outcome so far: the engine's result, or an error and its reason.
    result: EngineResult | None = None
    error: str | None = None
    reason: str | None = None
    overflowed_call: dict[str, Any] | None = None  # kept if a reactive compaction follows
    # The engine's id of each broker tool call -> the broker's (broker/tools.py Rule 1);
    # made at the first call: most turns call no tool.
    call_ids: dict[str, str] | None = None
    # Rule 2: `save_progress` runs at the first delta of each `save_every_s` after the
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
            next_due = save_due(self.save_due, self.clock(), self.save_every_s)
            if next_due is not None:
                self.save_due = next_due
                self.save_progress(self)

    def take_steer(self) -> list[ChatMessage]:
        taken, self.steer_queue = self.steer_queue, []
        self.taken.extend(taken)
        return [as_chat(it) for it in taken]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], call_id: str | None = None
    ) -> str:
        if self.tools is None:
            raise EngineError(f"the broker offers no tool named {name!r}")
        ours = new_id()
        if call_id:
            if self.call_ids is None:
                self.call_ids = {}
            self.call_ids[call_id] = ours
        return await self.tools(name, arguments, ours)

    def abort(self, reason: str) -> None:
        self.abort_reason = reason
        if self.scope is not None:
            self.scope.cancel()

    async def call(self, engine: Engine, request: TurnRequest, deadline: float) -> bool:
        """Call the engine once (Rule 3) and keep its outcome; did the context overflow
        before any output (a reactive compaction may help)?"""
        self.result, self.error, self.reason = None, None, None
        # One scope for both the timeout and an abort: cheaper than nesting fail_after.
        with self.engine_scope(deadline) as scope:
            try:
                self.result = await engine.run(request, self)
            except TimeoutError:  # the engine's own (say, an HTTP client's)
                self.error, self.reason = TIMEOUT, "timeout"
            except EngineError as exc:
                self.error, self.reason = str(exc), exc.reason
            except Exception as exc:
                log.exception("engine crashed", session=self.session, turn=self.id)
                self.error, self.reason = f"the agent failed ({type(exc).__name__})", "engine"
        if scope.cancelled_caught:
            if self.abort_reason is None:  # cancelled, but not by an abort: the deadline
                self.error, self.reason = TIMEOUT, "timeout"
            else:
                self.reason = self.abort_reason  # aborted by the machine
        elif self.result is not None and (problem := bad_file_event(self.result.events)):
            # A change the ledger cannot record must not pass for a completed turn.
            self.error = f"The agent reported a file change the broker cannot record: {problem}"
            self.reason = "bad_event"
        if self.reason != "context_overflow" or self.parts:
            return False
        self.overflowed_call = {
            "outcome": "context_overflow",
            "error": self.error,
            "started_at": self.started_ms,
            "ended_at": now_ms(),
        }
        return True

    def refuse(self) -> None:
        """Its inputs do not fit the context window: it fails without an engine call."""
        assert self.plan is not None
        self.result, self.reason = None, "context_overflow"
        self.error = (
            f"The message is too long for this agent's context window "
            f"({self.plan.tokens} tokens of {self.plan.budget})."
        )

    def engine_scope(self, deadline: float) -> anyio.CancelScope:
        """A fresh scope for one engine call (Rule 3), cancelled already if the turn
        was aborted before the call."""
        self.scope = anyio.CancelScope(deadline=deadline)
        if self.abort_reason is not None:
            self.scope.cancel()
        return self.scope


def as_chat(item: ItemInfo) -> ChatMessage:
    return ChatMessage(
        "user", item.content, name=item.sender_name, msg_id=item.msg_id, item_id=item.id
    )
