"""What a turn sends to the engine and what it commits, built from the session's facts.

Pure functions of their arguments (the token counter aside, which only counts): the
actor holds the facts, these shape them.

Each message is counted once, when it is first made, and that count goes to both the
ledger and the in-memory history. Steered items the engine took but did not use run in
the next turn; only a prefix counts as used, as a used item after an unused one would
run ahead of it, so it runs again, in order, instead.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Literal

import orjson

from broker.config import Persona, Settings
from broker.context.session import SessionContext, summary_text
from broker.engines.base import Engine
from broker.mailbox.running_turn import RunningTurn, as_chat
from core import queue_machine as m
from core import turn_events as te
from core.compaction import compaction_due
from core.engine_types import (
    ChatMessage,
    HistoryMessage,
    ToolCall,
    ToolSpec,
    TurnRequest,
)
from core.packing import ContextPlan, Msg
from core.titles import outcome_line, turn_title
from core.turn_summary import summarize
from ledger.port.records import ItemInfo, ItemStatus, Route, TurnRecord
from plumbing import logs
from plumbing.ids import now_ms

log = logs.get("broker.actor")
Status = Literal["completed", "aborted", "failed"]


def route_of(item: ItemInfo) -> Route:
    assert item.channel is not None
    return (item.channel, item.peer_kind, item.peer_id, item.thread_id)


def persona_of(settings: Settings, persona: str | None) -> Persona | None:
    return settings.personas.get(persona or "")


def window(settings: Settings, persona: str | None, engine: Engine) -> int:
    chosen = persona_of(settings, persona)
    return chosen.context_window if chosen and chosen.context_window else engine.context_window


def compaction_model(settings: Settings, persona: str | None) -> str | None:
    """The model a compaction asks for: the persona's `compaction_model`, its engine's,
    else the model its turns ask for (None: the engine's own)."""
    chosen = persona_of(settings, persona)
    if chosen is not None and chosen.compaction_model is not None:
        return chosen.compaction_model
    engine = settings.engine
    if chosen is not None and chosen.engine is not None:
        engine = settings.engines.get(chosen.engine, engine)
    if engine.compaction_model is not None:
        return engine.compaction_model
    return chosen.model if chosen else None


# What every turn's system prompt ends with: the archive and the state record exist.
ARCHIVE_LINES = (
    "Older turns of this conversation are kept in its archive, never lost: the"
    " conversation_recall tool searches and reads them.\n"
    "The session-state record (a system message) shows what matters now; keep a decision,"
    " constraint or fact in it with the remember tool."
)


def workspace(settings: Settings, persona: str | None, engine: Engine) -> str | None:
    """The folder the persona's engine works in: the engine's own `workspace`
    attribute, else its `[engine] workspace`; None without one."""
    own = getattr(engine, "workspace", None)
    if isinstance(own, str) and own:
        return own
    chosen = persona_of(settings, persona)
    config = settings.engine
    if chosen is not None and chosen.engine is not None:
        config = settings.engines.get(chosen.engine, config)
    return config.workspace or None


def system_prompt(settings: Settings, persona: str | None, kind: str) -> str:
    """The persona's prompt (a worker's task-focused one), then `ARCHIVE_LINES`."""
    chosen = persona_of(settings, persona)
    prompt = chosen.system_prompt if chosen else None
    if prompt is None and kind == "worker":
        prompt = settings.workers.system_prompt
    return ARCHIVE_LINES if prompt is None else f"{prompt}\n\n{ARCHIVE_LINES}"


def notes(start: m.StartTurn, items: dict[str, ItemInfo]) -> tuple[str, ...]:
    if not start.dropped_note:
        return ()
    dropped = [items.get(i.id) for i in start.dropped_note]
    listed = "; ".join((d.content[:80] if d else "?") for d in dropped)
    return (
        f"{len(start.dropped_note)} earlier message(s) were dropped because the "
        f"queue was full: {listed}",
    )


def plan(
    ctx: SessionContext, settings: Settings, turn: RunningTurn, persona: str | None = None
) -> ContextPlan:
    cfg, size, system = settings.engine, turn.window, turn.system
    chosen = persona_of(settings, persona)
    built = ctx.build(
        window=size,
        reserve=cfg.reserve_reply_tokens,
        threshold=cfg.compaction_threshold,
        system=ctx.fixed("system", system) if system else None,
        inputs=tuple(turn.input_msgs),
        notes=tuple([ctx.msg("system", n) for n in turn.notes]),
        label=turn.session,
        scratchpad=tuple([ctx.fixed("system", text) for text in turn.scratchpad]),
        mode=chosen.context_mode if chosen else "verbatim",
        summary_turns=chosen.summary_turns if chosen else 0,
        verbatim_turns=chosen.verbatim_turns if chosen else 0,
    )
    reported = ctx.last_reported
    if (
        reported is not None
        and not built.compaction_due
        and ctx.blocks
        and compaction_due(built.tokens, size, cfg.compaction_threshold, reported)
    ):
        return replace(built, compaction_due=True)  # a copy only when it changes
    return built


def request(
    label: str, turn: RunningTurn, ctx: SessionContext, tools: tuple[ToolSpec, ...]
) -> TurnRequest:
    assert turn.plan is not None
    plan = turn.plan  # the state record, the scratchpad and the bridge note go in only as planned
    head: tuple[HistoryMessage, ...] = ()
    if plan.state is not None:
        head += (ChatMessage("system", plan.state.content),)
    if plan.scratchpad is not None:
        head += (plan.scratchpad,)
    if ctx.summary:
        head += (ChatMessage("system", summary_text(ctx.summary)),)
    if plan.bridge is not None:
        head += (ChatMessage("system", plan.bridge.content),)
    head += tuple([ChatMessage("system", s.content) for s in plan.summaries])
    return TurnRequest(
        session=label,
        turn_id=turn.id,
        system_prompt=turn.system,
        model=turn.model,
        tools=tools,
        history=head + turn.plan.history,
        inputs=tuple(as_chat(i) for i in turn.inputs),
        notes=turn.notes,
    )


def turn_events(turn: RunningTurn, status: str, error: str | None) -> list[te.Event]:
    """Every event of the turn, the turn's `error` last for a failed turn; no more are
    written while it runs (running_turn.py: the rest go with the commit)."""
    turn.events.closed = True
    if status == "failed":
        turn.events.events.append(("error", {"by": "broker", "text": error or "the turn failed"}))
    return turn.events.events


def settle(turn: RunningTurn) -> tuple[m.Outcome, Status, ItemStatus]:
    """The turn's outcome for the machine, its status and its items' (`turn.taken`
    trimmed to the prefix the engine used)."""
    result = turn.result
    if result is not None and result.steer_used is not None:
        used = set(result.steer_used)
        prefix = 0
        while prefix < len(turn.taken) and turn.taken[prefix].id in used:
            prefix += 1
        turn.taken = turn.taken[:prefix]
    if turn.abort_reason is not None and result is None and turn.error is None:
        return "aborted", "aborted", "cancelled" if turn.abort_reason == "stop" else "queued"
    if turn.error is not None:
        return "failed", "failed", "done"
    return "completed", "completed", "done"


def outbox(
    label: str,
    turn: RunningTurn,
    inputs: list[ItemInfo],
    text: str,
    status: str,
    fallback: Route | None,
) -> tuple[str, str, str] | None:
    latest = next((i for i in reversed(inputs) if i.channel), None)
    route = route_of(latest) if latest is not None else fallback
    if route is None:
        return None  # e.g. a worker: its reply goes to its parent as a result
    channel, peer_kind, peer_id, thread_id = route
    frame = {
        "type": "deliver",
        "out_id": turn.out_id,
        "session": label,
        "turn": turn.id,
        "peer_kind": peer_kind,
        "peer_id": peer_id,
        "thread_id": thread_id,
        "in_reply_to": [i.msg_id for i in inputs if i.msg_id is not None],
        "text": text,
        "status": "final" if status == "completed" else status,
    }
    return turn.out_id, channel, orjson.dumps(frame).decode()


def record(
    label: str,
    turn: RunningTurn,
    parent: str | None,
    ctx: SessionContext,
    engine: str,
    route: Route | None,
    kept_prompt: str | None = None,
) -> tuple[TurnRecord, m.Outcome, list[Msg], Msg | None]:
    """The turn's record; its outcome for the machine, the steered inputs' and the
    reply's messages for the in-memory history."""
    assert turn.start is not None
    all_inputs = turn.inputs + turn.taken  # every item taken: `settle` trims `taken` after
    outcome, status, item_status = settle(turn)
    result, error = turn.result, turn.error
    text = result.text if result is not None else "".join(turn.parts)
    reply = error if status == "failed" else text
    taken_msgs = [ctx.msg("user", i.content, i.sender_name, turn.id) for i in turn.taken]
    reply_msg = ctx.msg("assistant", text, turn_id=turn.id) if text else None
    rec = TurnRecord(
        turn_id=turn.id,
        session=label,
        parent_id=parent,
        type=turn.start.kind,
        status=status,
        reason=turn.reason,
        error=error,
        output=text,
        engine=engine,
        model=result.model if result else None,
        started_at=turn.started_ms,
        completed_at=now_ms(),
        prompt_tokens=result.prompt_tokens if result else None,
        completion_tokens=result.completion_tokens if result else None,
        inputs=all_inputs,
        item_status=item_status,
        item_reason="stopped" if item_status == "cancelled" else None,
        tool_calls=_broker_ids(result.tool_calls, turn.call_ids) if result else [],
        outbox=outbox(label, turn, all_inputs, reply or "", status, route),
        input_tokens=[msg.tokens for msg in (*turn.input_msgs, *taken_msgs)],
        output_tokens=reply_msg.tokens if reply_msg else None,
        events=turn_events(turn, status, error),
        progress_saved=turn.progress_saved,
        bridges=ctx.planned_bridges if turn.plan is not None and turn.plan.bridge else (),
        events_written=turn.events.sent,
        outcome=outcome_line(status, turn.reason, error),
        metadata=result.metadata if result is not None else None,
        system_prompt=turn.system if turn.system != kept_prompt else None,
    )
    rec.title, rec.title_source = turn_title(
        [i.content for i in all_inputs], text, rec.events, turn.start.kind
    )
    rec.summary = summarize(rec.outcome or "", text, rec.tool_calls, rec.events)
    return rec, outcome, taken_msgs, reply_msg


def _broker_ids(calls: list[ToolCall], ours: dict[str, str] | None) -> list[ToolCall]:
    """The calls under the broker's ids where it ran them (broker/tools/table.py)."""
    if not ours:
        return calls
    return [replace(c, id=ours[c.id]) if c.id in ours else c for c in calls]


def log_turn(rec: TurnRecord, written: str, channel: str | None) -> None:
    if not log.is_enabled_for(logging.INFO):
        return  # its fields are gathered only to be logged: not every turn for nothing
    log.info(
        "turn " + (rec.status if written != "lost" else "lost"),
        session=rec.session,
        turn=rec.turn_id,
        turn_type=rec.type,
        reason=rec.reason,
        msg_ids=[i.msg_id for i in rec.inputs if i.msg_id],
        channel=channel,
        ms=rec.completed_at - rec.started_at,
        prompt_tokens=rec.prompt_tokens,
        completion_tokens=rec.completion_tokens,
    )
