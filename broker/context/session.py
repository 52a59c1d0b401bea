"""A session's context state: the shell around the pure packing and compaction core.

Token counts are computed once, when a message is first seen, and stored with the
message; loading a session never re-tokenizes history (rows written before counts
were stored are counted once on load). The history kept in memory is the thread the
ledger loads (`LedgerPort.session_start`, `ledger.reads.load_thread`): the turns after
the latest compaction boundary, without the inputs of aborted turns.

The state record is the thread's (ledger/state_records.py): loaded with the thread,
then moved on by each turn committed on it with the same pure `advance` the ledger
stores, so what a turn's context shows is what `session.state` shows. It goes into the
context only within the budget (core/packing.py: whole, else short, else not at all),
counted line by line (tokens.py), as a turn changes only a line or two of it. Bridge
notes (what a merged-in session was about) wait here until a turn that showed them
completes; the ledger keeps them until then too.

Each turn of the history keeps its summary's text (core/turn_summary.py), loaded with
the thread or made at its commit; a `summary`-mode context counts the tokens of those
it asks for, once each, when it first asks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Literal

from broker.context.tokens import TokenCounter
from core.packing import ContextInput, ContextPlan, Msg, TurnBlock, WholeHistory, assemble
from core.session_state import EMPTY, SessionState, TurnFacts, advance, record_lines
from ledger.port.protocols import Thread


@dataclass
class SessionContext:
    counter: TokenCounter
    blocks: list[TurnBlock] = field(default_factory=list)
    summary: str | None = None
    summary_tokens: int = 0
    last_reported: int | None = None  # the prompt tokens the engine last reported
    state: SessionState = EMPTY
    bridges: dict[str, str] = field(default_factory=dict)  # id -> note
    planned_bridges: tuple[str, ...] = ()  # those the latest plan showed
    _fixed: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)
    # `blocks` flattened and summed (packing) and how many blocks that covers;
    # -1: stale, made again (once) by the next `build`; `add_turn` grows it in place.
    _whole: WholeHistory = field(default_factory=WholeHistory, repr=False)
    _whole_blocks: int = field(default=-1, repr=False)
    # The state record's messages (whole, short) as last rendered, and for which record;
    # its lines' token counts, so a new record costs only its changed lines.
    _rendered: tuple[SessionState, str | None, Msg | None, Msg | None] | None = field(
        default=None, repr=False
    )
    _state_lines: dict[str | bytes, int] = field(default_factory=dict, repr=False)
    # The turns' summaries (text by turn id) and those counted so far (summary mode).
    summaries: dict[str, str] = field(default_factory=dict)
    _summary_msgs: dict[str, Msg] = field(default_factory=dict, repr=False)

    def fixed(self, role: str, content: str) -> Msg:
        """A message that recurs turn after turn (the system prompt, the state record):
        counted once while its text stays the same."""
        tokens = self._fixed.get((role, content))
        if tokens is None:
            if len(self._fixed) >= 16:
                self._fixed.clear()
            tokens = self._fixed[(role, content)] = self.counter.count_message(role, content)
        return Msg(role, content, tokens)  # type: ignore[arg-type]

    def msg(
        self, role: str, content: str, name: str | None = None, turn_id: str | None = None
    ) -> Msg:
        tokens = self.counter.count_message(role, content, name)
        return Msg(role, content, tokens, turn_id=turn_id, name=name)  # type: ignore[arg-type]

    def build(
        self,
        *,
        window: int,
        reserve: int,
        threshold: float,
        system: Msg | None,
        inputs: tuple[Msg, ...],
        notes: tuple[Msg, ...],
        label: str | None = None,
        scratchpad: tuple[Msg, ...] = (),
        mode: Literal["verbatim", "summary"] = "verbatim",
        summary_turns: int = 5,
        verbatim_turns: int = 2,
    ) -> ContextPlan:
        summary = None
        if self.summary:
            summary = Msg("system", summary_text(self.summary), self.summary_tokens)
        whole, short = self._state_msgs(label)
        bridge = bridge_text(self.bridges)
        plan = assemble(
            ContextInput(
                window=window,
                reserve_reply=min(reserve, window - 1),
                system=system,
                state=whole,
                state_short=short,
                summary=summary,
                history=self.blocks,
                inputs=inputs,
                notes=notes,
                threshold=threshold,
                whole=self._whole_history(),
                bridge=self.msg("system", bridge) if bridge else None,
                scratchpad=scratchpad,
                mode=mode,
                summaries=_Summaries(self) if mode == "summary" else {},
                summary_turns=summary_turns,
                verbatim_turns=verbatim_turns,
            )
        )
        self.planned_bridges = tuple(self.bridges) if plan.bridge is not None else ()
        return plan

    def _state_msgs(self, label: str | None) -> tuple[Msg | None, Msg | None]:
        done = self._rendered
        if done is None or done[0] is not self.state or done[1] != label:
            lines, short_lines = record_lines(self.state, label)
            whole = self._state_msg(lines)
            # Most records have no lists: then the short form is the whole, counted once.
            short = whole if short_lines == len(lines) else self._state_msg(lines[:short_lines])
            done = self._rendered = (self.state, label, whole, short)
        return done[2], done[3]

    def _state_msg(self, lines: list[str]) -> Msg | None:
        # Each turn changes the record's counts line: counted by line, the rest is known
        # (docs/performance.md).
        if not lines:
            return None
        tokens = self.counter.count_message_lines("system", lines, self._state_lines)
        return Msg("system", "\n".join(lines), tokens)

    def turn_committed(self, facts: TurnFacts, bridges_shown: tuple[str, ...]) -> None:
        """A turn committed on this thread."""
        self.state = advance(self.state, facts)
        if facts.status == "completed":
            for bridge in bridges_shown:
                self.bridges.pop(bridge, None)

    def add_bridges(self, notes: dict[str, str]) -> None:
        self.bridges.update(notes)

    def _whole_history(self) -> WholeHistory:
        if self._whole_blocks != len(self.blocks):
            messages = tuple(chain.from_iterable(block.messages for block in self.blocks))
            tokens = sum(block.tokens for block in self.blocks)
            self._whole, self._whole_blocks = WholeHistory(messages, tokens), len(self.blocks)
        return self._whole

    def summary_msg(self, turn_id: str) -> Msg | None:
        """The turn's summary as a context message, counted once; None if it has none."""
        found = self._summary_msgs.get(turn_id)
        if found is None:
            text = self.summaries.get(turn_id)
            if text is None:
                return None
            found = self._summary_msgs[turn_id] = self.msg("system", turn_summary_text(text))
        return found

    def add_turn(self, turn_id: str, messages: list[Msg], summary: str | None = None) -> None:
        if summary is not None:
            self.summaries[turn_id] = summary
        if messages:
            block = TurnBlock(turn_id, tuple(messages))
            if self._whole_blocks == len(self.blocks):
                self._whole, self._whole_blocks = self._whole.plus(block), self._whole_blocks + 1
            self.blocks.append(block)

    def compacted(self, summary: str, keep: tuple[TurnBlock, ...]) -> None:
        self.summary = summary
        self.summary_tokens = self.counter.count_message("system", summary_text(summary))
        self.blocks, self._whole_blocks = list(keep), -1
        self.last_reported = None
        kept = {block.turn_id for block in keep}
        self.summaries = {t: s for t, s in self.summaries.items() if t in kept}
        self._summary_msgs.clear()

    def reset(self, carried: SessionState = EMPTY) -> None:
        """`/new`: a fresh thread has no history, no summary and no state, but for the
        record an automatic rollover carries over (`carried`, as it stored it with
        `ledger.state_records.seed_thread`). Bridge notes stay: they are about the
        person, not the thread."""
        self.blocks, self.summary, self.summary_tokens, self.last_reported = [], None, 0, None
        self._whole_blocks = -1
        self.summaries, self._summary_msgs = {}, {}
        self.state = carried


def bridge_text(bridges: dict[str, str]) -> str | None:
    if not bridges:
        return None
    return "\n\n".join(bridges.values())


def summary_text(summary: str) -> str:
    return f"Summary of the earlier conversation:\n{summary}"


def turn_summary_text(summary: str) -> str:
    return f"An earlier turn, summarized (conversation_recall reads it whole):\n{summary}"


class _Summaries(Mapping[str, Msg]):
    """The turns' summary messages as packing asks for them, counted on first ask."""

    def __init__(self, ctx: SessionContext) -> None:
        self._ctx = ctx

    def __getitem__(self, turn_id: str) -> Msg:
        found = self._ctx.summary_msg(turn_id)
        if found is None:
            raise KeyError(turn_id)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._ctx.summaries)

    def __len__(self) -> int:
        return len(self._ctx.summaries)


def from_thread(thread: Thread | None, counter: TokenCounter) -> SessionContext:
    """A session's context from its thread as the ledger loaded it (None: no head)."""
    ctx = SessionContext(counter)
    if thread is None:
        return ctx
    ctx.state = thread.state
    if thread.summary is not None:
        ctx.summary = thread.summary
        ctx.summary_tokens = counter.count_message("system", summary_text(thread.summary))
    count = counter.count_message
    for turn in thread.turns:
        ctx.add_turn(
            turn.id,
            [
                Msg(
                    role,
                    content,
                    count(role, content) if tokens is None else tokens,
                    turn_id=turn.id,
                )
                for role, content, tokens in turn.messages
            ],
            turn.summary,
        )
    return ctx
