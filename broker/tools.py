"""Broker tools offered to engines: what an agent may ask the broker to do mid-turn.

The tools see the daemon through `ToolContext` only: dispatching a task, the ledger's
reads, the recall settings and the token counter.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from broker.config import Settings
from broker.context import TokenCounter
from broker.core.engine_types import ToolSpec
from ledger.dispatch import Dispatched
from ledger.errors import LedgerLookupError
from ledger.port import LedgerPort

from .engines.base import EngineError
from .recall_tool import RECALL_TOOL, conversation_recall


class ToolContext(Protocol):
    """What the tools need of the daemon (the mailbox registry provides it)."""

    @property
    def ledger(self) -> LedgerPort: ...

    @property
    def counter(self) -> TokenCounter: ...

    @property
    def settings(self) -> Settings: ...

    async def dispatch(
        self,
        *,
        parent: str | None,
        parent_turn: str | None,
        tool_call: str | None,
        target: dict[str, Any],
        task: str,
    ) -> Dispatched: ...


AGENT_SEND = ToolSpec(
    name="agent_send",
    description=(
        "Dispatch a task to a worker agent. With target.kind 'new_session' a new worker "
        "session is made; with 'session' the task is queued on that existing session. The "
        "worker's result comes back to you later as a message; do not wait for it."
    ),
    parameters={
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": ["dispatch"]},
            "target": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": ["session", "new_session"]},
                    "session": {"type": "string"},
                    "label_hint": {"type": "string"},
                },
                "required": ["kind"],
            },
            "task": {"type": "string", "description": "What the worker should do."},
        },
        "required": ["task"],
    },
)


async def agent_send(hub: ToolContext, session: str, turn: str, arguments: dict[str, Any]) -> str:
    if arguments.get("op", "dispatch") != "dispatch":
        raise EngineError("agent_send supports only op 'dispatch'")
    task = arguments.get("task")
    if not isinstance(task, str) or not task.strip():
        raise EngineError("agent_send needs a non-empty 'task'")
    target = arguments.get("target") or {"kind": "new_session"}
    if not isinstance(target, dict):
        raise EngineError("agent_send 'target' must be an object")
    try:
        done = await hub.dispatch(
            parent=session, parent_turn=turn, tool_call=None, target=target, task=task
        )
    except LedgerLookupError as exc:
        raise EngineError(f"agent_send refused: {exc}") from exc
    return orjson.dumps(
        {"dispatched": True, "session": done.session, "dispatch": done.dispatch}
    ).decode()


async def call(
    hub: ToolContext, session: str, turn: str, name: str, arguments: dict[str, Any]
) -> str:
    if name == "agent_send":
        return await agent_send(hub, session, turn, arguments)
    if name == RECALL_TOOL.name:
        cfg = hub.settings.recall
        return await conversation_recall(
            hub.ledger,
            session,
            arguments,
            hub.counter.count,
            cfg.budget_tokens,
            cross_session=cfg.cross_session,
        )
    raise EngineError(f"the broker offers no tool named {name!r}")


SPECS: tuple[ToolSpec, ...] = (AGENT_SEND, RECALL_TOOL)
