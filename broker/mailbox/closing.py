"""The closing summary a session's own engine writes when `session.close` is given none.

The engine is asked as a compaction asks it (core/compaction.py `summary_request`,
the summarizer's quiet TurnIO: no tools, nothing streamed), over the session's
current thread as the ledger holds it (its latest compaction summary and the newest
turns that fit half the window), for the model a compaction asks for. The call is
bounded by the engine's timeout (the smaller of `timeout_s` and
`compaction_timeout_s`); an engine that fails, overruns, answers nothing or more
than a closing summary holds, or that says it cannot summarize (`summarizes =
False`, as the echo engine), gives None, and the ledger makes the mechanical summary
of the thread's turn titles instead. Nothing is written here: the close decides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio

from broker.config import Settings
from broker.context import TokenCounter
from broker.context.session import from_thread
from broker.engines.base import Engine, EngineError
from broker.mailbox import turn_parts as parts
from broker.mailbox.compactor import QuietIO
from core import compaction
from core.closing import MAX_SUMMARY
from core.engine_types import ChatMessage, TurnRequest
from core.packing import TurnBlock
from ledger.port.protocols import LedgerPort
from plumbing import logs
from plumbing.ids import new_id

log = logs.get("broker.closing")

FOCUS = (
    "This conversation is ending. Write its closing summary for whoever picks it up"
    f" later, in at most {MAX_SUMMARY // 2} characters: what it was about, what was"
    " decided, and what was left open."
)


def newest_fitting(blocks: Sequence[TurnBlock], budget: int) -> tuple[TurnBlock, ...]:
    """The newest blocks whose tokens fit `budget`, oldest first."""
    kept: list[TurnBlock] = []
    used = 0
    for block in reversed(blocks):
        if used + block.tokens > budget:
            break
        kept.append(block)
        used += block.tokens
    return tuple(reversed(kept))


async def engine_summary(
    ledger: LedgerPort,
    settings: Settings,
    engine_for: Callable[[str | None], Engine],
    counter: TokenCounter,
    label: str,
) -> str | None:
    """`label`'s closing summary from its engine, or None (the mechanical one then)."""
    read = await ledger.session_start(label)
    persona = read.start.persona
    engine = engine_for(persona)
    if not getattr(engine, "summarizes", True):
        return None
    ctx = from_thread(read.thread, counter)
    window = parts.window(settings, persona, engine)
    turns = newest_fitting(ctx.blocks, window // 2)
    if not turns and not ctx.summary:
        return None  # nothing was said: the mechanical summary says so
    system, user = compaction.summary_request(turns, ctx.summary, FOCUS, max_message_chars=4000)
    request = TurnRequest(
        session=label,
        turn_id=new_id(),
        system_prompt=system,
        history=(),
        inputs=(ChatMessage("user", user),),
        model=parts.compaction_model(settings, persona),
    )
    chosen = parts.persona_of(settings, persona)
    cfg = settings.engine
    if chosen is not None and chosen.engine is not None:
        cfg = settings.engines.get(chosen.engine, cfg)
    try:
        with anyio.fail_after(min(cfg.timeout_s, cfg.compaction_timeout_s)):
            result = await engine.run(request, QuietIO())
        text = result.text.strip()
        if not text or len(text) > MAX_SUMMARY:
            raise EngineError("the summary was empty or too long")
    except Exception as exc:  # any failure: the mechanical summary, never a hang
        log.warning(
            "closing summary from the engine failed; using the mechanical one",
            session=label,
            error=str(exc) or type(exc).__name__,
        )
        return None
    return text
