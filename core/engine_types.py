"""The values that engines, context packing and the ledger share: requests, messages, results.

Pure value types; the `Engine` interface that uses them is `broker.engines.base`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from core.records import record

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
    # Free-form metadata of the turn (a JSON object), stored with it and returned by reads.
    metadata: dict[str, Any] | None = None
