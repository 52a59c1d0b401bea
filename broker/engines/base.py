"""The engine interface: stream text, report usage, call broker tools, take steering.

An engine gets a `TurnRequest` (the assembled context) and a `TurnIO` (how it
talks back to the broker while it runs) and returns an `EngineResult`.

Rule 1: the broker owns every timeout and every abort. It runs `Engine.run`
        inside a cancel scope; an engine must not swallow cancellation, and
        should stop at once when cancelled (the text it already streamed
        through `io.delta` is kept as the partial output).
Rule 2: an engine that cannot go on raises `EngineError` with a sentence a
        person can read; the broker records the turn as failed and tells the
        adapter.
Rule 3: steering: an engine with `accepts_steering = True` calls
        `io.take_steer()` at each step where it can take new user input and
        folds what it gets into the turn. A steered message counts as an input
        of the turn only if the engine used it (`EngineResult.steer_used`);
        the others run in the next turn, so none is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from broker.records import record

Role = Literal["system", "user", "assistant", "tool"]


@record
class ChatMessage:
    role: Role
    content: str
    name: str | None = None  # the sender's display name for user messages
    msg_id: str | None = None  # the channel's id, for inputs
    item_id: str | None = None  # the queue item, for inputs


class HistoryMessage(Protocol):
    """A message of an earlier turn as engines see it. The broker hands over the
    messages its context packing chose as they are, without copying them."""

    @property
    def role(self) -> Role: ...
    @property
    def content(self) -> str: ...
    @property
    def name(self) -> str | None: ...


@record
class ToolSpec:
    """A broker tool offered to the engine (JSON schema for the arguments)."""

    name: str
    description: str
    parameters: dict[str, Any]


@record
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text as the model produced it
    result: str
    status: Literal["ok", "error"]


@record
class TurnRequest:
    session: str
    turn_id: str
    system_prompt: str | None
    history: tuple[HistoryMessage, ...]  # earlier turns, oldest first
    inputs: tuple[ChatMessage, ...]  # this turn's inputs, in arrival order
    notes: tuple[str, ...] = ()  # broker notes, e.g. messages dropped by a queue cap
    tools: tuple[ToolSpec, ...] = ()
    model: str | None = None


@dataclass(slots=True)
class EngineResult:
    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    # Item ids of the steered messages the engine really used. None: every
    # message it took with `io.take_steer()`. The others run in the next turn.
    steer_used: tuple[str, ...] | None = None
    # Typed events the engine reports: (type, payload), type one of intent, action,
    # file, snapshot, decision, error, llm, feedback. The broker adds its own.
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class EngineError(Exception):
    """The engine could not produce a reply; the message is for people."""

    def __init__(self, message: str, *, reason: str = "engine") -> None:
        super().__init__(message)
        self.reason = reason  # engine | timeout | context_overflow


class TurnIO(Protocol):
    async def delta(self, text: str) -> None:
        """Stream a piece of the reply to the adapter (best effort)."""

    def take_steer(self) -> list[ChatMessage]:
        """User messages steered into this turn since the last call (non-blocking)."""

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Run a broker tool; raises EngineError for an unknown tool."""


class Engine(Protocol):
    name: str
    accepts_steering: bool
    context_window: int

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult: ...

    async def aclose(self) -> None:
        """Release what the engine holds across turns (connections); called at shutdown."""
