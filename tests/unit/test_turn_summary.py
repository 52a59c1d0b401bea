"""Turn summaries (core/turn_summary.py) and the `summary` context mode (core/packing.py):
pure, stepped without a loop."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from core.engine_types import ToolCall
from core.packing import ContextInput, Msg, TurnBlock, WholeHistory, assemble
from core.turn_summary import MAX_ITEMS, render, summarize


def msg(role: str, tokens: int, content: str = "") -> Msg:
    return Msg(role, content or f"{role} {tokens}", tokens)  # type: ignore[arg-type]


def block(turn_id: str, *sizes: int) -> TurnBlock:
    roles = itertools.cycle(("user", "assistant"))
    return TurnBlock(
        turn_id, tuple(msg(r, s, f"{turn_id} {r}") for r, s in zip(roles, sizes, strict=False))
    )


def summary_msg(turn_id: str, tokens: int = 8) -> Msg:
    return msg("system", tokens, f"summary of {turn_id}")


# --- the summary ------------------------------------------------------------------


def test_a_summary_lists_actions_decisions_files_and_the_outcome() -> None:
    calls = [
        ToolCall("1", "read_file", '{"path": "a.py"}', "ok", "ok"),
        ToolCall("2", "write_file", '{"path": "b.py"}', "ok", "ok"),
        ToolCall("3", "bash", '{"command": "pytest"}', "1 failed", "error"),
        ToolCall("4", "read_file", '{"path": "b.py"}', "ok", "ok"),
    ]
    events: list[tuple[str, dict[str, Any]]] = [
        ("intent", {"by": "broker", "inputs": []}),
        ("action", {"by": "broker", "tool": "read_file", "status": "ok"}),  # a call above
        ("action", {"tool": "view", "args": {"path": "c.md"}}),  # the engine's own
        ("file", {"path": "d.py", "op": "create"}),
        ("decision", {"decision": "Keep raw SQL\nbecause the user said so"}),
    ]
    got = summarize("completed", "Wrote b.py.\nMore detail.", calls, events)
    assert got == {
        "actions_taken": [
            "read_file a.py",
            "write_file b.py",
            "bash",
            "read_file b.py",
            "view c.md",
            "create d.py",
        ],
        "decisions": ["Keep raw SQL"],
        "files_read": ["a.py", "c.md"],  # b.py was read but also written: modified
        "files_modified": ["b.py", "d.py"],
        "outcome": "completed: Wrote b.py.",
    }
    text = render("Fix the tests", got)
    assert text.splitlines()[0] == "- Fix the tests: completed: Wrote b.py."
    assert "  files modified: b.py; d.py" in text.splitlines()


def test_a_failed_turn_keeps_its_status_line_as_outcome() -> None:
    got = summarize("failed (timeout): the agent took too long", "partial", [], [])
    assert got["outcome"] == "failed (timeout): the agent took too long"
    assert got["actions_taken"] == got["files_read"] == got["decisions"] == []


@given(st.lists(st.text(min_size=1, max_size=20), max_size=3 * MAX_ITEMS))
def test_every_list_is_bounded_and_holds_each_entry_once(names: list[str]) -> None:
    calls = [ToolCall(str(n), name, "{}", "", "ok") for n, name in enumerate(names)]
    got = summarize("completed", "", calls, [("decision", {"text": n}) for n in names])
    for key in ("actions_taken", "decisions"):
        assert len(got[key]) <= MAX_ITEMS
        assert len(set(got[key])) == len(got[key])


@given(
    st.sampled_from(["completed", "aborted", "failed (timeout): too long"]),
    st.text(max_size=300),
    st.lists(st.sampled_from(["intent", "llm", "error", "progress"]), max_size=4),
)
def test_a_turn_with_nothing_listed_says_the_outcome_a_listing_turn_would(
    outcome: str, reply: str, kinds: list[str]
) -> None:
    # Such a turn returns early, without the lists' clean-up; events a summary does not
    # list (and a `file` event without a path) change nothing, and one decision more
    # takes the whole way and says the same outcome.
    events: list[tuple[str, dict[str, Any]]] = [(k, {"text": "x"}) for k in kinds]
    short = summarize(outcome, reply, [], events)
    assert short == summarize(outcome, reply, [], [*events, ("file", {})])
    assert short["actions_taken"] == short["files_modified"] == []
    listing = summarize(outcome, reply, [], [*events, ("decision", {"text": "keep it"})])
    assert listing == {**short, "decisions": ["keep it"]}


# --- the summary mode -------------------------------------------------------------


def summary_ctx(
    history: tuple[TurnBlock, ...],
    summaries: dict[str, Msg],
    *,
    window: int = 1000,
    summary_turns: int = 5,
    verbatim_turns: int = 2,
) -> ContextInput:
    return ContextInput(
        window=window,
        reserve_reply=100,
        system=msg("system", 20, "you are a helper"),
        state=None,
        summary=None,
        history=history,
        inputs=(msg("user", 10, "now?"),),
        mode="summary",
        summaries=summaries,
        summary_turns=summary_turns,
        verbatim_turns=verbatim_turns,
    )


def test_summary_mode_packs_the_last_summaries_in_place_of_older_turns() -> None:
    history = tuple(block(f"t{n}", 30, 30) for n in range(8))
    summaries = {f"t{n}": summary_msg(f"t{n}") for n in range(8) if n != 4}
    plan = assemble(summary_ctx(history, summaries, summary_turns=3))
    contents = [m.content for m in plan.messages]
    # System, the summaries of the newest three older turns that have one (t4 has
    # none), oldest first, then the two newest turns verbatim, then the input.
    assert contents == [
        "you are a helper",
        "summary of t2",
        "summary of t3",
        "summary of t5",
        "t6 user",
        "t6 assistant",
        "t7 user",
        "t7 assistant",
        "now?",
    ]
    assert plan.summaries == (summaries["t2"], summaries["t3"], summaries["t5"])
    assert (plan.kept_turns, plan.dropped_turns) == (2, 6)  # the older ones: a recall hint
    assert plan.tokens == 20 + 3 * 8 + 4 * 30 + 10 == sum(m.tokens for m in plan.messages)
    assert not plan.over_budget


def test_summary_mode_stays_within_the_budget() -> None:
    history = tuple(block(f"t{n}", 30, 30) for n in range(8))
    summaries = {f"t{n}": summary_msg(f"t{n}", 40) for n in range(8)}
    # Budget 200, 30 fixed: the two verbatim turns first (120), then of the 50 left
    # the newest older turn's summary (40), not a second.
    plan = assemble(summary_ctx(history, summaries, window=300, summary_turns=5))
    assert plan.tokens == 30 + 120 + 40 <= plan.budget == 200
    assert [m.content for m in plan.summaries] == ["summary of t5"]
    assert plan.kept_turns == 2
    # A tighter budget keeps the newest turn, cut if need be, before any summary.
    tight = assemble(summary_ctx(history, summaries, window=200, summary_turns=5))
    assert (tight.kept_turns, tight.summaries) == (1, ())
    assert tight.tokens <= tight.budget == 100


@given(
    sizes=st.lists(st.integers(1, 80), max_size=12),
    summary_tokens=st.integers(1, 60),
    window=st.integers(200, 800),
    summary_turns=st.integers(0, 6),
    verbatim_turns=st.integers(0, 4),
)
def test_summary_mode_never_exceeds_the_budget_and_keeps_order(
    sizes: list[int], summary_tokens: int, window: int, summary_turns: int, verbatim_turns: int
) -> None:
    history = tuple(block(f"t{n}", s, s) for n, s in enumerate(sizes))
    summaries = {f"t{n}": summary_msg(f"t{n}", summary_tokens) for n in range(len(sizes))}
    ctx = summary_ctx(
        history,
        summaries,
        window=window,
        summary_turns=summary_turns,
        verbatim_turns=verbatim_turns,
    )
    plan = assemble(ctx)
    assert plan.over_budget or plan.tokens <= plan.budget
    assert plan.tokens == sum(m.tokens for m in plan.messages)
    assert len(plan.summaries) <= summary_turns
    # Summaries only of turns not shown verbatim, oldest first.
    shown = {m.content.split()[0] for m in plan.history}
    summarized = [m.content.split()[-1] for m in plan.summaries]
    assert not shown & set(summarized)
    assert summarized == sorted(summarized, key=lambda t: int(t[1:]))
    assert plan.kept_turns <= verbatim_turns
    # Compaction is due exactly as in verbatim mode.
    verbatim = assemble(
        ContextInput(
            window=ctx.window,
            reserve_reply=ctx.reserve_reply,
            system=ctx.system,
            state=None,
            summary=None,
            history=history,
            inputs=ctx.inputs,
            whole=WholeHistory().plus(history[0]) if len(history) == 1 else None,
        )
    )
    assert plan.compaction_due == verbatim.compaction_due
