"""Context packing as a pure function: ``assemble(ContextInput) -> ContextPlan``.

No I/O, no tokenizer: every ``Msg`` carries its token count (the caller counts once,
with ``TokenCounter.count_message``, and caches it). ``budget = window - reserve_reply``.
The order is system, state, scratchpad, summary, bridge (each if present), then
history, then notes, then the inputs, each input a message of its own, in the given
order.

The fixed parts (system, summary, notes, inputs) always go in; if they alone exceed
the budget the plan is ``over_budget``, carries no history, and the caller fails the
turn with a clear message instead of sending too much. The wanted parts are never
forced and never make a plan ``over_budget``: the state record goes in whole if it
fits beside the fixed parts, else its short form if that fits, else not at all; then
the bridge note if it fits too; then the scratchpad's first rendering (best first:
the whole pad, then a pointer to it) that fits both what the fixed parts leave and
``SCRATCHPAD_SHARE`` of the budget, so a large pad cannot crowd out the history turn
after turn. They take their room before history does, and once in they count as
fixed (``plan.state``, ``plan.bridge``, ``plan.scratchpad`` say what went in).

Otherwise ``tokens <= budget``. History is walked from the newest turn back; whole
turns are kept while they fit, and the walk stops at the first turn that does not
fit, so the kept turns are always a suffix of the history, in order. A ``group`` (a
tool call and its result) is never split; groups live inside one turn, and a group
whose messages are not adjacent spans everything between them. Only the newest turn
may be cut, when it does not fit whole: its newest messages that fit are kept, cut at
a group boundary (``cut_messages`` says how many were left out), so the latest
exchange is not lost to one oversized tool result; an older turn that does not fit is
dropped whole, so history never starts with a reply whose question is missing.

In ``summary`` mode (a persona's ``context_mode``) only the newest ``verbatim_turns``
turns are history; each of the older ones counts as dropped (so a recall hint is looked
for), and in its place the plan carries the summaries (``summaries``, by turn id) of
the newest ``summary_turns`` of them that have one, oldest first, after the bridge.
They are wanted, not fixed: the verbatim turns are packed first, as above, and the
summaries take the room they leave, newest first while they fit. ``compaction_due`` is reckoned as
if every turn were verbatim, so a thread is compacted as often in either mode.

``compaction_due`` is True iff there is history and ``fixed + sum(all history) >
min(threshold * window, budget)``: whenever history is dropped, and already a little
before, once the full context passes ``threshold`` of the window. ``whole``, when
given, must be ``history``'s messages in order with their tokens
(``WholeHistory().plus(block)`` for each block); a history that fits whole is then
taken from it as it is, the same plan without the walk (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from itertools import chain
from typing import Literal, NamedTuple

from core.engine_types import Role
from core.records import record

SCRATCHPAD_SHARE = 0.25  # of the budget, at most, for the scratchpad


@record
class Msg:
    role: Role
    content: str
    tokens: int  # as counted by TokenCounter.count_message, framing included
    turn_id: str | None = None
    group: str | None = None  # messages sharing a group are never split (tool call+result)
    name: str | None = None

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {self.tokens}")


@record
class TurnBlock:
    """One turn of history, its messages oldest first."""

    turn_id: str
    messages: tuple[Msg, ...]
    tokens: int = field(init=False)  # the sum over messages, computed once

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", _tokens(self.messages))


@record
class WholeHistory:
    """Every message of a history, oldest first, and their tokens: kept by a caller
    that appends turns, so that a history that fits whole is packed without a walk."""

    messages: tuple[Msg, ...] = ()
    tokens: int = 0

    def plus(self, block: TurnBlock) -> WholeHistory:
        return WholeHistory(self.messages + block.messages, self.tokens + block.tokens)


@record
class ContextInput:
    window: int
    reserve_reply: int
    system: Msg | None
    state: Msg | None
    summary: Msg | None
    # Oldest -> newest, after the latest compaction; read only (the caller's own list is
    # handed over as it is, not copied for every turn).
    history: Sequence[TurnBlock]
    inputs: tuple[Msg, ...]
    notes: tuple[Msg, ...] = ()
    threshold: float = 0.85
    whole: WholeHistory | None = None  # `history` flattened and summed, if the caller has it
    state_short: Msg | None = None  # the state's short form, for a tight budget
    bridge: Msg | None = None  # what a merged-in session was about (never forced)
    scratchpad: tuple[Msg, ...] = ()  # renderings of the agent's notes, best first
    mode: Literal["verbatim", "summary"] = "verbatim"
    summaries: Mapping[str, Msg] = field(default_factory=dict)  # by turn id (summary mode)
    summary_turns: int = 5  # summaries at most, in summary mode
    verbatim_turns: int = 2  # the newest turns kept as they are, in summary mode

    def __post_init__(self) -> None:
        if self.window <= 0:
            raise ValueError(f"window must be > 0, got {self.window}")
        if not 0 <= self.reserve_reply < self.window:
            raise ValueError(f"reserve_reply must be in [0, window), got {self.reserve_reply}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")

    @property
    def budget(self) -> int:
        return self.window - self.reserve_reply


@record
class ContextPlan:
    head: tuple[Msg, ...]  # system, state, scratchpad, summary, bridge: those that went in
    tail: tuple[Msg, ...]  # notes and inputs
    tokens: int
    budget: int
    kept_turns: int  # turns with at least one message in the plan
    dropped_turns: int  # whole turns left out (older than every kept turn)
    over_budget: bool
    compaction_due: bool
    cut_messages: int = 0  # messages left out of the oldest kept turn (a cut newest turn)
    history: tuple[Msg, ...] = ()  # the part of `messages` that is history
    state: Msg | None = None  # the state record's message that went in, if any
    bridge: Msg | None = None  # the bridge note, if it went in
    scratchpad: Msg | None = None  # the rendering of the scratchpad that went in
    summaries: tuple[Msg, ...] = ()  # the turn summaries that went in (summary mode)

    @property
    def messages(self) -> tuple[Msg, ...]:
        """The whole context in order. Made when asked: an engine takes its
        parts (state, history...) and few turns read the whole."""
        return self.head + self.history + self.tail


def assemble(ctx: ContextInput) -> ContextPlan:
    """Pack the context for one turn (see the module rules)."""
    tail = ctx.notes + ctx.inputs
    forced = _present(ctx.system, ctx.summary)
    fixed = _tokens(forced) + _tokens(tail)
    budget = ctx.budget
    if fixed > budget:
        return ContextPlan(
            head=forced,
            tail=tail,
            tokens=fixed,
            budget=budget,
            kept_turns=0,
            dropped_turns=len(ctx.history),
            over_budget=True,
            compaction_due=bool(ctx.history),  # fixed > budget >= its limit
        )
    state = ctx.state if _fits(ctx.state, fixed, budget) else None
    if state is None and _fits(ctx.state_short, fixed, budget):
        state = ctx.state_short
    fixed += state.tokens if state is not None else 0
    pad = None
    if ctx.scratchpad:  # the first rendering that fits, if any
        room = min(budget - fixed, int(budget * SCRATCHPAD_SHARE))
        pad = next((m for m in ctx.scratchpad if m.tokens <= room), None)
        fixed += pad.tokens if pad is not None else 0
    bridge = ctx.bridge if _fits(ctx.bridge, fixed, budget) else None
    fixed += bridge.tokens if bridge is not None else 0
    head = _present(ctx.system, state, pad, ctx.summary, bridge)
    whole = ctx.whole
    limit = min(ctx.threshold * ctx.window, budget)
    summaries: tuple[Msg, ...] = ()
    if ctx.mode == "summary":
        recent = ctx.verbatim_turns
        older, shown = _split(ctx.history, recent)
        fill = _fill(shown, budget - fixed)
        room = budget - fixed - fill.tokens
        summaries = _summaries(older, ctx.summaries, ctx.summary_turns, room)
        all_tokens = whole.tokens if whole is not None else _tokens_of(ctx.history)
        due = bool(ctx.history) and fixed + all_tokens > limit
        fixed += _tokens(summaries)
        head += summaries
    elif whole is not None and fixed + whole.tokens <= budget:
        fill = _Fill(whole.messages, whole.tokens, len(ctx.history), 0, True)  # fits whole: no walk
        due = bool(ctx.history) and fixed + fill.tokens > limit
    else:
        fill = _fill(ctx.history, budget - fixed)
        due = bool(ctx.history) and (not fill.all_fit or fixed + fill.tokens > limit)
    return ContextPlan(
        head=head,
        tail=tail,
        tokens=fixed + fill.tokens,
        budget=budget,
        kept_turns=fill.turns,
        dropped_turns=len(ctx.history) - fill.turns,
        over_budget=False,
        compaction_due=due,
        cut_messages=fill.cut,
        history=fill.messages,
        state=state,
        bridge=bridge,
        scratchpad=pad,
        summaries=summaries,
    )


def _split(
    history: Sequence[TurnBlock], recent: int
) -> tuple[Sequence[TurnBlock], Sequence[TurnBlock]]:
    """(the older turns, the newest `recent`)."""
    cut = max(len(history) - recent, 0)
    return history[:cut], history[cut:]


def _summaries(
    older: Sequence[TurnBlock], summaries: Mapping[str, Msg], most: int, room: int
) -> tuple[Msg, ...]:
    """The summaries of the newest `most` older turns that have one and fit in `room`,
    oldest first; the walk stops at the first that does not fit."""
    chosen: list[Msg] = []
    used = 0
    for block in reversed(older):
        if len(chosen) >= most:
            break
        found = summaries.get(block.turn_id)
        if found is None:
            continue
        if used + found.tokens > room:
            break
        chosen.append(found)
        used += found.tokens
    return tuple(reversed(chosen))


def _tokens_of(history: Sequence[TurnBlock]) -> int:
    total = 0
    for block in history:
        total += block.tokens
    return total


def _fits(m: Msg | None, used: int, budget: int) -> bool:
    return m is not None and used + m.tokens <= budget


def _present(*messages: Msg | None) -> tuple[Msg, ...]:
    return tuple([m for m in messages if m is not None])


def _tokens(messages: Sequence[Msg]) -> int:
    total = 0
    for m in messages:
        total += m.tokens
    return total


class _Fill(NamedTuple):
    messages: tuple[Msg, ...]
    tokens: int
    turns: int
    cut: int  # messages left out of the one cut turn
    all_fit: bool


def _fill(history: Sequence[TurnBlock], room: int) -> _Fill:
    """The newest turns that fit in ``room``: whole turns, the newest maybe cut."""
    chosen: list[tuple[Msg, ...]] = []
    used = 0
    for turn in reversed(history):
        if used + turn.tokens <= room:
            chosen.append(turn.messages)
            used += turn.tokens
            continue
        if chosen:
            return _Fill(_flatten(chosen), used, len(chosen), 0, False)
        part, tokens = _newest_part(turn.messages, room)  # the newest turn is too big
        if not part:
            return _Fill((), 0, 0, 0, False)
        return _Fill(part, tokens, 1, len(turn.messages) - len(part), False)
    return _Fill(_flatten(chosen), used, len(chosen), 0, True)


def _newest_part(messages: tuple[Msg, ...], room: int) -> tuple[tuple[Msg, ...], int]:
    """The longest suffix of ``messages`` that fits in ``room`` and starts at a group
    boundary (no group has messages on both sides of the cut), with its tokens."""
    first: dict[str, int] = {}
    for i, m in enumerate(messages):
        if m.group is not None:
            first.setdefault(m.group, i)
    best, best_tokens = len(messages), 0
    tokens, lowest = 0, len(messages)  # lowest first index of a group seen in the suffix
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        tokens += m.tokens
        if tokens > room:
            break
        if m.group is not None:
            lowest = min(lowest, first[m.group])
        if lowest >= i:
            best, best_tokens = i, tokens
    return messages[best:], best_tokens


def _flatten(newest_first: list[tuple[Msg, ...]]) -> tuple[Msg, ...]:
    return tuple(chain.from_iterable(reversed(newest_first)))
