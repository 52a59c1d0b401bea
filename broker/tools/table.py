"""Broker tools offered to engines: what an agent may ask the broker to do mid-turn.

The tools see the daemon through `ToolContext` only: dispatching a task, the ledger's
reads, the recall settings and the token counter, a compaction after the turn, the
session-state record, the scratchpad's live copy and the timer wheel. The scratchpad,
compaction and timer tools are `broker/tools/session.py`; `worker_done` is
`broker/tools/workers.py`.

A tool call the broker runs has the broker's own id (a ULID, made by the running
turn): a dispatch records it as its `tool_call`, and the turn's commit stores the call
under it, so a worker links back to the call that spawned it.
"""

from __future__ import annotations

from typing import Any

import orjson

from broker.engines.base import EngineError
from broker.tools import session as tools_session
from broker.tools import workers as tools_workers
from broker.tools.context import ToolContext
from broker.tools.recall import RECALL_TOOL, conversation_recall
from core.engine_types import ToolSpec
from ledger.port.errors import LedgerLookupError
from ledger.port.records import Handoff

__all__ = ["SPECS", "WORKER_SPECS", "ToolContext", "call", "specs_for"]


MAX_HANDOFF_KEYS = 50

AGENT_SEND = ToolSpec(
    name="agent_send",
    description=(
        "Dispatch a task to a worker agent. With target.kind 'new_session' a new worker "
        "session is made; with 'session' the task is queued on that existing session; with "
        "'fork' a new session forked at target.turn (it sees the history up to that turn) "
        "takes the task. The worker's result comes back to you later as a message; do not "
        "wait for it."
    ),
    parameters={
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": ["dispatch"]},
            "target": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": ["session", "new_session", "fork"]},
                    "session": {"type": "string"},
                    "turn": {"type": "string", "description": "fork: the turn to fork at."},
                    "label_hint": {"type": "string"},
                },
                "required": ["kind"],
            },
            "task": {"type": "string", "description": "What the worker should do."},
            "scratchpad_keys": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Entries of your scratchpad to hand the worker with the task"
                " (your session-state record goes along anyway).",
            },
        },
        "required": ["task"],
    },
)


async def agent_send(
    hub: ToolContext, session: str, turn: str, arguments: dict[str, Any], call_id: str | None
) -> str:
    if arguments.get("op", "dispatch") != "dispatch":
        raise EngineError("agent_send supports only op 'dispatch'")
    task = arguments.get("task")
    if not isinstance(task, str) or not task.strip():
        raise EngineError("agent_send needs a non-empty 'task'")
    target = arguments.get("target") or {"kind": "new_session"}
    if not isinstance(target, dict):
        raise EngineError("agent_send 'target' must be an object")
    keys = arguments.get("scratchpad_keys") or []
    if (
        not isinstance(keys, list)
        or len(keys) > MAX_HANDOFF_KEYS
        or not all(isinstance(k, str) and k for k in keys)
    ):
        raise EngineError(
            f"agent_send 'scratchpad_keys' must be a list of at most {MAX_HANDOFF_KEYS} names"
        )
    handoff = Handoff(hub.state_record(session), tuple(dict.fromkeys(keys)))
    try:
        done = await hub.dispatch(
            parent=session,
            parent_turn=turn,
            tool_call=call_id,
            target=target,
            task=task,
            handoff=handoff,
        )
    except LedgerLookupError as exc:
        raise EngineError(f"agent_send refused: {exc}") from exc
    return orjson.dumps(
        {"dispatched": True, "session": done.session, "dispatch": done.dispatch}
    ).decode()


async def call(
    hub: ToolContext,
    session: str,
    turn: str,
    name: str,
    arguments: dict[str, Any],
    call_id: str | None = None,
) -> str:
    """Run the tool `name` for `session`'s running `turn`; `call_id` is the broker's id
    of the call."""
    if name == "agent_send":
        return await agent_send(hub, session, turn, arguments, call_id)
    if name == RECALL_TOOL.name:
        cfg = hub.settings.recall
        return await conversation_recall(
            hub.ledger,
            session,
            arguments,
            hub.counter.count,
            cfg.budget_tokens,
            cross_session=cfg.cross_session,
            neighbours=(cfg.neighbours_before, cfg.neighbours_after),
        )
    try:
        if name in tools_session.BY_NAME:
            return await tools_session.BY_NAME[name](hub, session, arguments)
        if name == tools_workers.WORKER_DONE.name:
            return await tools_workers.worker_done(hub, session, arguments)
    except LedgerLookupError as exc:  # a refusal is the tool's answer, not a failed turn
        raise EngineError(f"{name} refused: {exc}") from exc
    raise EngineError(f"the broker offers no tool named {name!r}")


SPECS: tuple[ToolSpec, ...] = (AGENT_SEND, RECALL_TOOL, *tools_session.SPECS)
WORKER_SPECS: tuple[ToolSpec, ...] = (*SPECS, tools_workers.WORKER_DONE)


def specs_for(kind: str) -> tuple[ToolSpec, ...]:
    """The tools offered to a session of `kind`: a worker may also report (worker_done)."""
    return WORKER_SPECS if kind == "worker" else SPECS
