"""The agent's tools on its own session: its scratchpad, a compaction, a timer, and
`remember`, which keeps a decision, a constraint or a fact in the session-state record.

Each takes the same arguments as the operator op it mirrors and is checked by the same
code (`scratchpad.get`/`scratchpad.merge`, `session.compact`'s focus, `timer.add`
through `spec_of`), on the calling session only; bad arguments raise `EngineError`
naming the field, and change nothing. `session_compact` never runs beside a turn: it
asks for a manual compaction, which the lifecycle machine starts once the running turn
is committed, as a compaction turn of its own. A scratchpad merge is shown to the
session's actor once committed, so the next turn's context carries it. `remember`
writes nothing itself: its successful call is part of the turn, and the turn's commit
puts it among the record's key decisions (core/session_state.py), so the record keeps
it while its thread goes on, across compactions and restarts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from broker.engines.base import EngineError
from broker.timers import spec_of
from broker.tools.context import ToolContext
from core.engine_types import ToolSpec
from core.session_state import REMEMBER_KINDS, REMEMBER_TOOL, TEXT_CHARS
from ledger.port.errors import LedgerLookupError
from plumbing import logs
from plumbing.ids import now_ms
from wire.framing import ProtocolError

log = logs.get("broker.tools")
FOCUS_MAX = 4000  # characters, as `session.compact`'s instructions

SCRATCHPAD_GET = ToolSpec(
    name="scratchpad_get",
    description="Read your scratchpad: a JSON object of notes you keep across turns.",
    parameters={"type": "object", "properties": {}},
)
SCRATCHPAD_MERGE = ToolSpec(
    name="scratchpad_merge",
    description=(
        "Change your scratchpad with a JSON merge patch (RFC 7396): keys you give are set"
        " (objects merge key by key), a key set to null is removed, the rest stays. A"
        " non-empty scratchpad is shown to you at the start of every turn."
    ),
    parameters={
        "type": "object",
        "properties": {"patch": {"type": "object"}},
        "required": ["patch"],
    },
)
SESSION_COMPACT = ToolSpec(
    name="session_compact",
    description=(
        "Ask for this conversation's history to be summarized once this turn ends, to"
        " free room in your context. Optional 'focus': what the summary must keep."
    ),
    parameters={
        "type": "object",
        "properties": {"focus": {"type": "string", "maxLength": FOCUS_MAX}},
    },
)
SCHEDULE = ToolSpec(
    name="schedule",
    description=(
        "Set a timer on this session: at its time, 'text' comes to you as a message."
        " Give 'in_s' (seconds from now) or 'at' (RFC 3339, e.g. 2026-01-31T09:00:00Z),"
        " and 'every_s' (at least 1) to repeat."
    ),
    parameters={
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "in_s": {"type": "number", "minimum": 0},
            "at": {"type": "string"},
            "every_s": {"type": "number", "minimum": 1},
        },
        "required": ["text"],
    },
)

REMEMBER = ToolSpec(
    name=REMEMBER_TOOL,
    description=(
        "Keep something that must stay true for the rest of this conversation in your"
        " session-state record, which you see at the start of every turn even after older"
        " turns are summarized: a 'decision' taken, a 'constraint' to respect, or a 'fact'"
        " learned. One short sentence in 'text'."
    ),
    parameters={
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": list(REMEMBER_KINDS)},
            "text": {"type": "string", "maxLength": TEXT_CHARS},
        },
        "required": ["kind", "text"],
    },
)


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


async def scratchpad_get(hub: ToolContext, session: str, arguments: dict[str, Any]) -> str:
    return _json(await hub.ledger.scratchpad_get(session))


async def scratchpad_merge(hub: ToolContext, session: str, arguments: dict[str, Any]) -> str:
    patch = arguments.get("patch")
    if not isinstance(patch, dict):
        raise EngineError("scratchpad_merge needs 'patch', a JSON object")
    now = now_ms()
    try:
        merged = await hub.ledger.scratchpad_merge(session, patch, now)
    except LedgerLookupError as exc:
        raise EngineError(f"scratchpad_merge refused: {exc}") from exc
    hub.scratchpad_merged(session, merged, now)  # the next turn shows it
    return _json(merged)


async def session_compact(hub: ToolContext, session: str, arguments: dict[str, Any]) -> str:
    focus = arguments.get("focus")
    if focus is not None and (not isinstance(focus, str) or len(focus) > FOCUS_MAX):
        raise EngineError(f"session_compact 'focus' must be text of at most {FOCUS_MAX} characters")
    hub.compact_later(session, focus or None)  # never beside a turn
    log.info("compaction asked for by the agent", session=session, focus=focus)
    return "The conversation will be compacted as soon as this turn ends."


async def schedule(hub: ToolContext, session: str, arguments: dict[str, Any]) -> str:
    now = now_ms()
    try:
        spec = spec_of(arguments, now, None)
    except ProtocolError as exc:
        raise EngineError(f"schedule refused ({exc.field}): {exc}") from exc
    timer = await hub.ledger.add_timer(session, spec, now)
    hub.timers_changed()
    log.info("timer added by the agent", session=session, timer=timer.timer, next_at=timer.next_at)
    return _json({"timer": timer.timer, "next_at": timer.next_at})


async def remember(hub: ToolContext, session: str, arguments: dict[str, Any]) -> str:
    kind, text = arguments.get("kind"), arguments.get("text")
    if kind not in REMEMBER_KINDS:
        raise EngineError(f"remember 'kind' must be one of {', '.join(REMEMBER_KINDS)}")
    if not isinstance(text, str) or not text.strip():
        raise EngineError("remember needs 'text', one short sentence")
    log.info("remembered by the agent", session=session, kind=kind)
    return f"Kept as a {kind} in your session-state record from the next turn on."


Tool = Callable[[ToolContext, str, dict[str, Any]], Awaitable[str]]
BY_NAME: dict[str, Tool] = {
    SCRATCHPAD_GET.name: scratchpad_get,
    SCRATCHPAD_MERGE.name: scratchpad_merge,
    SESSION_COMPACT.name: session_compact,
    SCHEDULE.name: schedule,
    REMEMBER.name: remember,
}
SPECS = (SCRATCHPAD_GET, SCRATCHPAD_MERGE, SESSION_COMPACT, SCHEDULE, REMEMBER)
