"""A turn whose activity failed every attempt, ended as a local actor ends a failing
turn.

The same code path as the local runtime: the turn's items run once more in a turn
actor whose engine fails at once with the runtime's reason, so the turn is recorded
failed with that reason, the person is told as for an engine that fails, and the
items are consumed by that turn; nothing of it is written twice or differently. The
engine is the only thing changed: the actor's other ports (ledger, deliveries,
deltas) are the node's own, reached through the proxy.
"""

from __future__ import annotations

from typing import Any, cast

from broker.engines.base import Engine, EngineError, TurnIO
from broker.mailbox.ports import ActorPorts
from core.engine_types import EngineResult, TurnRequest

# The turn's `reason` in the ledger: its activity failed, not (necessarily) its engine.
REASON = "runtime"


def failure_text(kind: str) -> str:
    """What the person is told, in the words a local crashed engine gets
    (running_turn.py: "the agent failed (RuntimeError)")."""
    return f"the agent failed ({kind})"


class FailingEngine:
    """The session's engine, as far as the turn sees it, failing at once."""

    def __init__(self, engine: Engine, error: str) -> None:
        self.name = engine.name
        self.accepts_steering = False
        self.context_window = engine.context_window
        self.error = error

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult:
        raise EngineError(self.error, reason=REASON)

    async def aclose(self) -> None:
        pass  # the node's engine is not this one's to close


class FailingPorts:
    """The node's ports but for the engine."""

    def __init__(self, ports: ActorPorts, error: str) -> None:
        self._ports = ports
        self._error = error

    def engine_for(self, persona: str | None) -> Engine:
        return FailingEngine(self._ports.engine_for(persona), self._error)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ports, name)


def failing_ports(ports: ActorPorts, error: str) -> ActorPorts:
    return cast(ActorPorts, FailingPorts(ports, error))
