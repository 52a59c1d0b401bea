"""The engine interface: stream text, report usage, call broker tools, take steering.

An engine gets a `TurnRequest` (the assembled context) and a `TurnIO` (how it
talks back to the broker while it runs) and returns an `EngineResult`.

The broker owns every timeout and every abort: it runs `Engine.run` inside a cancel
scope, and an engine must not swallow cancellation and should stop at once when
cancelled (the text it already streamed through `io.delta` is kept as the partial
output). An engine that cannot go on raises `EngineError` with a sentence a person
can read; the broker records the turn as failed and tells the adapter. An engine with
`accepts_steering = True` calls `io.take_steer()` at each step where it can take new
user input and folds what it gets into the turn; a steered message counts as an input
of the turn only if the engine used it (`EngineResult.steer_used`), and the others run
in the next turn, so none is lost.
"""

from __future__ import annotations

from typing import Any, Protocol

from core.engine_types import ChatMessage, EngineResult, TurnRequest


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

    async def call_tool(
        self, name: str, arguments: dict[str, Any], call_id: str | None = None
    ) -> str:
        """Run a broker tool; raises EngineError for an unknown tool. `call_id` is the
        id the engine gives the call in its `EngineResult.tool_calls`: the broker then
        records the call under its own id, which a worker it spawns links back to."""

    def event(self, kind: str, data: dict[str, Any]) -> None:
        """A typed event of the turn as it happens (one of `EVENT_TYPES`), written to
        the ledger while the turn runs. An `llm` event stands for a model call: an
        engine that reports its calls this way gets no `llm` event of the broker's."""


class Engine(Protocol):
    name: str
    accepts_steering: bool
    context_window: int

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult: ...

    async def aclose(self) -> None:
        """Release what the engine holds across turns (connections); called at shutdown."""
