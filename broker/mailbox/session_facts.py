"""What an actor knows of its session between turns, and how a turn's end changes it.

The in-memory history follows the same rule as the ledger's thread load
(`ledger/reads.py`, through `broker.context.session.from_thread`), so an actor that
starts later sees the same thread: a committed turn adds its inputs unless it was
aborted (they run again) and its reply when there is one; a compaction replaces what
it summarized; `/new` empties it. Only what the ledger committed changes the facts: a
lost commit changes none, and a turn committed off the thread (orphan) only the token
totals (the state record is the thread's: ledger/state_records.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from broker.config import QueueSettings
from broker.context.session import SessionContext
from broker.mailbox.compactor import Compaction
from broker.mailbox.turn_commit import Written
from core import queue_machine as m
from core.packing import Msg
from core.scratchpad import renderings
from core.turn_summary import render
from ledger.port.records import ActorStart, ItemInfo, Route, TurnRecord, facts_of

SOURCES: dict[str, m.Source] = {s: s for s in ("person", "worker", "timer", "operator")}


@dataclass
class SessionFacts:
    ctx: SessionContext
    head: str | None = None
    persona: str | None = None
    kind: str = "dm"
    override: dict[str, Any] = field(default_factory=dict)  # the session's `/queue`
    turn_count: int = 0
    tokens: list[int] = field(default_factory=lambda: [0, 0])  # prompt, completion
    # The scratchpad's renderings for the context, and when it was merged (ms).
    scratchpad: tuple[str, ...] = ()
    scratchpad_at: int = -1
    stored_route: Route | None = None  # the session's, as the ledger had it at the start
    ancestors: tuple[Route | None, ...] = ()  # a worker's: its parents' (ActorStart)
    # The latest arrival with a channel: its route is the session's from then on. Kept
    # as the item, not made into a route per arrival: only a turn with no inbound asks.
    latest_inbound: ItemInfo | None = None

    @property
    def route(self) -> Route | None:
        """Where replies go when a turn has no inbound."""
        item = self.latest_inbound
        if item is None or item.channel is None:
            return self.stored_route
        return (item.channel, item.peer_kind, item.peer_id, item.thread_id)

    def load(self, start: ActorStart, ctx: SessionContext) -> None:
        ctx.add_bridges(self.ctx.bridges)  # bridge notes handed over while it loaded
        self.ctx, self.head, self.persona, self.kind = ctx, start.head, start.persona, start.kind
        self.turn_count, self.tokens = start.turns, list(start.tokens)
        self.stored_route, self.ancestors = start.route, start.ancestors
        self.kept_prompt: str | None = None  # the system prompt a commit kept on the session row
        self.files_known = start.files_known  # a turn-start snapshot lists the files then
        self.override = orjson.loads(start.override) if start.override else {}
        if start.scratchpad is not None:
            self.scratchpad_merged(orjson.loads(start.scratchpad), start.scratchpad_at)

    def scratchpad_merged(self, pad: Any, at: int) -> None:
        """A merge committed at `at`; one seen live while the actor loaded stays."""
        if at >= self.scratchpad_at:
            self.scratchpad, self.scratchpad_at = renderings(pad), at

    def limits(self, queue: QueueSettings) -> m.Limits:
        return m.Limits(
            debounce_s=self.override.get("debounce_ms", queue.debounce_ms) / 1000,
            cap=self.override.get("cap", queue.cap),
            drop=self.override.get("drop", queue.drop),
        )

    def machine_item(self, item: ItemInfo, default: m.QueueMode | None) -> m.Item:
        """The item as the queue machine sees it: its mode resolved (a mode the item
        asks for and may not have falls back as if it asked for none)."""
        source = SOURCES.get(item.source, "operator")
        override = self.override.get("mode")
        try:
            mode = m.resolve_mode(item.mode, None, override, default, source)
        except m.ModeRefused:
            mode = m.resolve_mode(None, None, override, default, source)
        return m.Item(item.id, item.seq, mode, source)

    def leave_thread(self) -> str | None:
        """`/new`: the next turn has no parent; the head left behind."""
        previous, self.head = self.head, None
        self.ctx.reset()
        return previous

    def carried(self, turn_id: str, summary: str) -> None:
        """An automatic rollover began the thread from a carry-over compaction turn."""
        self.head, self.turn_count = turn_id, self.turn_count + 1
        self.ctx.compacted(summary, ())

    def compacted(self, done: Compaction) -> None:
        self.head, self.turn_count = done.turn_id, self.turn_count + 1
        self.ctx.compacted(done.summary, done.keep)

    def committed(
        self,
        rec: TurnRecord,
        written: Written,
        inputs: list[Msg],
        reply: Msg | None,
        outcome: m.Outcome,
    ) -> m.Outcome:
        """Apply a turn's commit; its outcome for the queue machine."""
        if written == "lost":
            return outcome
        self.tokens[0] += rec.prompt_tokens or 0
        self.tokens[1] += rec.completion_tokens or 0
        if written == "orphan":
            return "failed"
        self.head, self.turn_count = rec.turn_id, self.turn_count + 1
        if rec.system_prompt is not None:
            self.kept_prompt = rec.system_prompt
        if not self.files_known and rec.summary and rec.summary.get("files_modified"):
            self.files_known = True
        self.ctx.turn_committed(facts_of(rec), rec.bridges)
        kept = [] if rec.status == "aborted" else list(inputs)
        if rec.output or rec.status == "completed":
            kept.append(reply or self.ctx.msg("assistant", rec.output, turn_id=rec.turn_id))
        summary = render(rec.title, rec.summary) if rec.summary is not None else None
        self.ctx.add_turn(rec.turn_id, kept, summary)
        return outcome
