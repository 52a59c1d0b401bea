"""Broker tools offered to engines: what an agent may ask the broker to do mid-turn.

The tools see the daemon through `ToolContext` only: dispatching a task, the ledger's
reads, the recall settings and the token counter, a compaction after the turn, the
session-state record, the scratchpad's live copy and the timer wheel. The scratchpad,
compaction and timer tools are `broker/tools/session.py`; `worker_done` is
`broker/tools/workers.py`.

A tool call the broker runs has the broker's own id (a ULID, made by the running
turn): a dispatch records it as its `tool_call`, and the turn's commit stores the call
under it, so a worker links back to the call that spawned it.

Every tool has a reach rule (`REACH`, core/reach.py): what it may touch of another
session and where that is checked. A call past its turn's reach, or naming a session
or turn that does not exist, answers the one sentence `REFUSED`, changes nothing, and
is logged and audited.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from broker.engines.base import EngineError
from broker.recall_indexer import semantic
from broker.tools import session as tools_session
from broker.tools import workers as tools_workers
from broker.tools.context import ToolContext
from broker.tools.people import PROPOSE_MERGE, propose_merge
from broker.tools.recall import RECALL_TOOL, conversation_recall
from core.engine_types import ToolSpec
from core.reach import REFUSED
from ledger.port.errors import (
    LedgerLookupError,
    LedgerWriteFailed,
    NotReachable,
    WriterClosed,
    WriterOverloaded,
)
from ledger.port.records import Handoff, Reaching
from plumbing import logs
from plumbing.ids import now_ms

__all__ = ["REACH", "SPECS", "WORKER_SPECS", "ToolContext", "call", "offered", "specs_for"]

log = logs.get("broker.tools")


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
            reaching=Reaching(session, AGENT_SEND.name, hub.wide),
        )
    except NotReachable:  # audited by the dispatch's own transaction
        _refused(session, turn, AGENT_SEND.name, target.get("kind"))
        raise EngineError(REFUSED) from None
    except LedgerLookupError as exc:
        raise EngineError(f"agent_send refused: {exc}") from exc
    return orjson.dumps(
        {"dispatched": True, "session": done.session, "dispatch": done.dispatch}
    ).decode()


def _embed(model_dir: str) -> Callable[[str], Awaitable[bytes]] | None:
    """The query encoder of recall by meaning, None when it is off."""
    model = semantic(model_dir)
    return model.encode_query if model.enabled else None


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
    external = hub.mcp is not None and name not in REACH and hub.mcp.has(name)
    if name not in REACH and not external:  # a broker tool with no reach rule is not run
        raise EngineError(f"the broker offers no tool named {name!r}")
    if name == "agent_send":
        return await agent_send(hub, session, turn, arguments, call_id)
    if name == RECALL_TOOL.name:
        cfg = hub.settings.recall
        try:
            return await conversation_recall(
                hub.ledger,
                session,
                arguments,
                hub.counter.count,
                cfg.budget_tokens,
                cross_session=cfg.cross_session,
                neighbours=(cfg.neighbours_before, cfg.neighbours_after),
                reaching=Reaching(session, RECALL_TOOL.name, hub.wide),
                embed=_embed(cfg.model_dir),
            )
        except NotReachable:  # a read: its refusal is audited in a write of its own
            _refused(session, turn, RECALL_TOOL.name, arguments.get("action"))
            try:
                await hub.ledger.audit(
                    op=RECALL_TOOL.name,
                    target=session,
                    outcome="refused",
                    uid=None,
                    role=None,
                    now=now_ms(),
                )
            except (WriterOverloaded, WriterClosed, LedgerWriteFailed) as exc:
                # Refused all the same; the log line above is its record then.
                log.error("refusal not audited", session=session, turn=turn, error=str(exc))
            raise EngineError(REFUSED) from None
    try:
        if name == PROPOSE_MERGE.name:
            return await propose_merge(hub, session, turn, arguments)
        if name in tools_session.BY_NAME:
            return await tools_session.BY_NAME[name](hub, session, arguments)
        if name == tools_workers.WORKER_DONE.name:
            return await tools_workers.worker_done(hub, session, arguments)
    except LedgerLookupError as exc:  # a refusal is the tool's answer, not a failed turn
        raise EngineError(f"{name} refused: {exc}") from exc
    if hub.mcp is not None and hub.mcp.has(name):
        return await hub.mcp.call(name, arguments, hub.mcp_servers(session))
    raise EngineError(f"the broker offers no tool named {name!r}")


def _refused(session: str, turn: str, tool: str, kind: object) -> None:
    log.warning(
        "tool call refused: past its turn's reach",
        session=session,
        turn=turn,
        tool=tool,
        kind=kind if isinstance(kind, str) else None,
    )


SPECS: tuple[ToolSpec, ...] = (AGENT_SEND, RECALL_TOOL, PROPOSE_MERGE, *tools_session.SPECS)

# What each tool may touch beyond its own session, and where that is checked.
# A tool marked "own" is given its calling session by the broker and takes no argument
# naming another (tests/unit/test_reach_tools.py checks both, for every tool offered).
# An MCP server's tool reaches no session of the broker: it runs in its server.
REACH: dict[str, str] = {
    AGENT_SEND.name: "a session target or a fork's turn: checked in the dispatch's"
    " transaction (ledger/dispatch.py)",
    RECALL_TOOL.name: "a session, a turn or all sessions: checked in the recall's read"
    " (ledger/recall/answer.py); all sessions are those the turn reaches",
    PROPOSE_MERGE.name: "two entities, each the turn's owner, one who spoke in a session"
    " it reaches, or any with reach any: checked in the proposal's transaction"
    " (ledger/proposals.py)",
    **{spec.name: "own" for spec in tools_session.SPECS},
    tools_workers.WORKER_DONE.name: "own",
}
WORKER_SPECS: tuple[ToolSpec, ...] = (*SPECS, tools_workers.WORKER_DONE)


def specs_for(kind: str) -> tuple[ToolSpec, ...]:
    """The tools offered to a session of `kind`: a worker may also report (worker_done)."""
    return WORKER_SPECS if kind == "worker" else SPECS


def offered(hub: ToolContext, label: str, kind: str) -> tuple[ToolSpec, ...]:
    """The broker's tools for `kind`, then the MCP tools `label`'s route rule allows."""
    if hub.mcp is None:
        return specs_for(kind)
    return specs_for(kind) + hub.mcp.specs(hub.mcp_servers(label))
