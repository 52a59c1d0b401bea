"""Compaction turns: summarize the oldest history into a turn of type `compaction`.

A compaction is a turn like any other: parent = the head, committed with its
`compactions` row in one transaction, and the head moves to it; nothing is deleted,
the summarized turns stay in the tree. It is committed before the turn it serves
starts, whatever its trigger, so their times never overlap (docs/turns.md), and its
commit, like any write, waits out a disk that refuses it. It changes nothing of the
actor's: it returns the committed compaction (`Compaction`), which the actor applies
to its head and its context.

The summary comes from the engine, bounded by `compaction_timeout_s`. If the engine
fails, hangs, or returns something empty or longer than the summary budget, a
deterministic summary is used instead, so a session can never stay in `compacting`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from broker.config import EngineSettings
from broker.context.session import SessionContext
from broker.engines.base import Engine, EngineError
from broker.mailbox.turn_commit import Written
from core import compaction
from core import turn_events as te
from core.engine_types import ChatMessage, TurnRequest
from core.lifecycle import Trigger
from core.packing import TurnBlock
from ledger.port.records import TurnRecord
from plumbing import logs
from plumbing.ids import new_id, now_ms

log = logs.get("broker.compaction")


@dataclass(frozen=True, slots=True)
class Compaction:
    """A committed compaction: the new head, and what the context keeps."""

    turn_id: str
    summary: str
    keep: tuple[TurnBlock, ...]


@dataclass(frozen=True, slots=True)
class Session:
    """The session being compacted, as the actor knows it."""

    label: str
    head: str | None
    ctx: SessionContext
    engine: Engine
    window: int
    cfg: EngineSettings
    commit: Callable[[TurnRecord], Awaitable[Written]]
    model: str | None = None  # the summarizer's (`engine.compaction_model`); None: the engine's


class QuietIO:
    """The summarizer's TurnIO: nothing is streamed to anyone, no tools, no steering."""

    async def delta(self, text: str) -> None:
        return None

    def take_steer(self) -> list[ChatMessage]:
        return []

    async def call_tool(
        self, name: str, arguments: dict[str, Any], call_id: str | None = None
    ) -> str:
        raise EngineError("no tools while summarizing")

    def event(self, kind: str, data: dict[str, Any]) -> None:
        return None  # the compaction turn records its one model call itself


def _call(usage: dict[str, Any], duration_ms: int) -> dict[str, Any]:
    return te.llm_payload(
        usage.get("model"), usage.get("prompt"), usage.get("completion"), duration_ms, "end_turn"
    )


def summary_budget(window: int) -> int:
    return max(64, min(2000, window // 8))


async def compact(
    session: Session, trigger: Trigger, instructions: str | None = None
) -> Compaction | None:
    """Run one compaction turn; None when there was nothing to summarize or it did not
    make it onto the thread."""
    ctx, engine_cfg, window = session.ctx, session.cfg, session.window
    keep = 0 if trigger == "manual" else int(window * engine_cfg.keep_recent_ratio)
    if trigger == "reactive":  # the engine overflowed though our count fit: keep less
        keep = min(keep, sum(block.tokens for block in ctx.blocks) // 2)
    plan = compaction.plan(tuple(ctx.blocks), keep)
    if plan is None:
        return None
    started, turn_id = now_ms(), new_id()
    system, user = compaction.summary_request(
        plan.summarize, ctx.summary, instructions, max_message_chars=4000
    )
    summary, fallback, usage = await _summarize(session, turn_id, system, user, plan)
    summary_tokens = ctx.counter.count(summary)
    rec = TurnRecord(
        turn_id=turn_id,
        session=session.label,
        parent_id=session.head,
        type="compaction",
        status="completed",
        reason=trigger,
        error=None,
        output=summary,
        engine=session.engine.name,
        model=usage.get("model"),
        started_at=started,
        completed_at=now_ms(),
        prompt_tokens=usage.get("prompt"),
        completion_tokens=usage.get("completion"),
        inputs=[],
        item_status="done",
        output_tokens=summary_tokens,
        # A deterministic fallback is not a model call (turn_events.py).
        events=[] if fallback else [("llm", _call(usage, now_ms() - started))],
        compaction={
            "summary": summary,
            "summarized_through_turn_id": plan.summarized_through,
            "first_kept_turn_id": plan.first_kept,
            "turns_summarized": plan.turns_summarized,
            "trigger": trigger,
            "instructions": instructions,
            "model": usage.get("model"),
            "fallback": int(fallback),
            "tokens_before": plan.tokens_before,
            "tokens_after": summary_tokens + plan.tokens_kept,
            "summary_tokens": summary_tokens,
            "summarization_input_tokens": usage.get("prompt"),
            "summarization_output_tokens": usage.get("completion"),
            "duration_ms": now_ms() - started,
        },
    )
    with anyio.CancelScope(shield=True):
        written = await session.commit(rec)
    if written != "thread":
        return None
    log.info(
        "session compacted",
        session=session.label,
        turn=turn_id,
        trigger=trigger,
        turns_summarized=plan.turns_summarized,
        tokens_before=plan.tokens_before,
        tokens_after=summary_tokens + plan.tokens_kept,
        fallback=fallback,
    )
    return Compaction(turn_id, summary, plan.keep)


async def _summarize(
    session: Session, turn_id: str, system: str, user: str, plan: compaction.CompactionPlan
) -> tuple[str, bool, dict[str, Any]]:
    ctx, budget = session.ctx, summary_budget(session.window)
    request = TurnRequest(
        session=session.label,
        turn_id=turn_id,
        system_prompt=system,
        history=(),
        inputs=(ChatMessage("user", user),),
        model=session.model,
    )
    try:
        with anyio.fail_after(session.cfg.compaction_timeout_s):
            result = await session.engine.run(request, QuietIO())
        text = result.text.strip()
        if not text or ctx.counter.count(text) > budget:
            raise EngineError("the summary was empty or too long")
        usage = {
            "model": result.model,
            "prompt": result.prompt_tokens,
            "completion": result.completion_tokens,
        }
        return text, False, usage
    except Exception as exc:  # any failure: the deterministic summary, never a hang
        log.warning(
            "summarizer failed; using the deterministic summary",
            session=session.label,
            error=str(exc) or type(exc).__name__,
        )
    text = compaction.fallback_summary(plan.summarize, ctx.summary, budget, ctx.counter)
    return text or "(earlier turns omitted)", True, {}
