"""The session-state record (core/session_state.py): extraction, sizes, JSON,
rendering, and its place in a turn's context within the budget."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.context import TokenCounter
from broker.context.session import SessionContext
from core.engine_types import ToolCall
from core.packing import ContextPlan
from core.session_state import (
    EMPTY,
    FOCUS_CHARS,
    MAX_DECISIONS,
    MAX_ERRORS,
    MAX_FILES,
    Counts,
    Decision,
    ErrorEntry,
    FileEntry,
    SessionState,
    TurnFacts,
    advance,
    dumps,
    first_line,
    from_json,
    loads,
    merge_patch,
    paths_in,
    render,
    render_both,
    state_from,
    to_json,
    totals_of,
)


def call(name: str, args: dict[str, Any], status: str = "ok", result: str = "done") -> ToolCall:
    return ToolCall(f"c-{name}", name, orjson.dumps(args).decode(), result, status)  # type: ignore[arg-type]


def turn(**kw: Any) -> TurnFacts:
    kw.setdefault("type", "turn")
    kw.setdefault("status", "completed")
    return TurnFacts(**kw)


# -- focus ---------------------------------------------------------------------------


def test_focus_is_the_first_line_of_the_persons_latest_message() -> None:
    s = advance(EMPTY, turn(inputs=(("person", "\n  fix   the login\nmore details"),)))
    assert s.focus == "fix the login"
    s = advance(s, turn(inputs=(("person", "first"), ("person", "then this"))))
    assert s.focus == "then this"


def test_focus_ignores_timers_workers_and_blank_messages() -> None:
    s = advance(EMPTY, turn(inputs=(("person", "plan the trip"),)))
    s = advance(s, turn(inputs=(("timer", "daily check"), ("worker", "result"))))
    s = advance(s, turn(inputs=(("person", "   \n  "),)))
    assert s.focus == "plan the trip"


def test_focus_is_cut_to_its_limit() -> None:
    s = advance(EMPTY, turn(inputs=(("person", "x" * 500),)))
    assert s.focus is not None and len(s.focus) == FOCUS_CHARS and s.focus.endswith("…")


def test_an_intent_event_says_the_focus_better_within_its_turn() -> None:
    s = advance(
        EMPTY,
        turn(inputs=(("person", "hi"),), events=(("intent", {"text": "refactor auth"}),)),
    )
    assert s.focus == "refactor auth"
    assert advance(s, turn(inputs=(("person", "new topic"),))).focus == "new topic"


# -- files ---------------------------------------------------------------------------


def test_files_come_from_tool_call_arguments_and_file_events() -> None:
    s = advance(
        EMPTY,
        turn(
            tool_calls=(
                call("read_file", {"path": "src/a.py"}),
                call("edit", {"file": "src/b.py", "text": "x"}),
                call("open", {"filename": " c.txt "}),
                call("grep", {"paths": ["d.py", "e.py", 3]}),
                call("shell", {"command": "ls"}),
            ),
            events=(("file", {"path": "f.md", "op": "create"}),),
        ),
    )
    assert [(f.path, f.action, f.turn) for f in s.files] == [
        ("src/a.py", "read_file", 1),
        ("src/b.py", "edit", 1),
        ("c.txt", "open", 1),
        ("d.py", "grep", 1),
        ("e.py", "grep", 1),
        ("f.md", "create", 1),
    ]


def test_a_file_seen_again_moves_to_the_end_with_its_latest_action() -> None:
    s = advance(EMPTY, turn(tool_calls=(call("read", {"path": "a"}), call("read", {"path": "b"}))))
    s = advance(s, turn(events=(("file", {"path": "a", "op": "edit"}),)))
    assert [(f.path, f.action, f.turn) for f in s.files] == [("b", "read", 1), ("a", "edit", 2)]


def test_paths_in_refuses_what_is_not_a_path() -> None:
    assert paths_in("not json") == []
    assert paths_in("[1, 2]") == []
    assert paths_in('{"path": ""}') == []
    assert paths_in('{"path": "a\\nb"}') == []
    assert paths_in(orjson.dumps({"path": "x" * 301}).decode()) == []
    assert paths_in('{"path": "a", "file": "a"}') == ["a"]


def test_a_failed_tool_call_touches_no_file() -> None:
    s = advance(EMPTY, turn(tool_calls=(call("write", {"path": "a"}, "error", "denied"),)))
    assert s.files == ()


# -- errors and decisions ------------------------------------------------------------


def test_errors_from_failed_calls_failed_turns_and_error_events() -> None:
    s = advance(
        EMPTY,
        turn(
            tool_calls=(call("pytest", {"k": "auth"}, "error", "2 failed\ntraceback..."),),
            events=(("error", {"text": "disk nearly full"}),),
        ),
    )
    s = advance(s, turn(status="failed", error="the engine timed out"))
    assert [(e.text, e.turn, e.resolved) for e in s.errors] == [
        ("pytest failed: 2 failed", 1, False),
        ("disk nearly full", 1, False),
        ("the engine timed out", 2, False),
    ]


def test_a_failed_turn_and_its_error_event_are_one_entry() -> None:
    s = advance(
        EMPTY,
        turn(status="failed", error="boom", events=(("error", {"text": "boom"}),)),
    )
    assert [e.text for e in s.errors] == ["boom"]


def test_the_same_call_succeeding_later_resolves_its_error() -> None:
    s = advance(EMPTY, turn(tool_calls=(call("pytest", {"k": "auth"}, "error", "1 failed"),)))
    s = advance(s, turn(tool_calls=(call("pytest", {"k": "other"}),)))
    assert not s.errors[0].resolved
    s = advance(s, turn(tool_calls=(call("pytest", {"k": "auth"}),)))
    assert s.errors[0].resolved and s.errors[0].turn == 1


def test_an_event_that_resolves_an_error_marks_it() -> None:
    s = advance(EMPTY, turn(events=(("error", {"text": "login fails"}),)))
    s = advance(s, turn(events=(("decision", {"text": "use argon2", "resolves": "login fails"}),)))
    assert [(e.text, e.resolved) for e in s.errors] == [("login fails", True)]
    assert [(d.text, d.turn) for d in s.decisions] == [("use argon2", 2)]
    s = advance(s, turn(events=(("feedback", {"resolves": "never seen"}),)))
    assert s.errors[-1] == ErrorEntry("never seen", 3, resolved=True)


def test_aborted_turns_are_not_errors() -> None:
    s = advance(EMPTY, turn(status="aborted", error="interrupted"))
    assert s.errors == () and s.counts.turns == 1


# -- sizes, compactions, counts, model -----------------------------------------------


def test_lists_keep_the_seeds_sizes_newest_last() -> None:
    s = EMPTY
    for n in range(30):
        s = advance(
            s,
            turn(
                events=(
                    ("file", {"path": f"f{n}", "op": "edit"}),
                    ("decision", {"text": f"d{n}"}),
                    ("error", {"text": f"e{n}"}),
                )
            ),
        )
    assert [f.path for f in s.files] == [f"f{n}" for n in range(10, 30)]
    assert [d.text for d in s.decisions] == [f"d{n}" for n in range(20, 30)]
    assert [e.text for e in s.errors] == [f"e{n}" for n in range(25, 30)]
    assert (MAX_FILES, MAX_DECISIONS, MAX_ERRORS) == (20, 10, 5)


def test_a_compaction_changes_nothing() -> None:
    s = advance(EMPTY, turn(inputs=(("person", "hi"),), prompt_tokens=5))
    assert advance(s, turn(type="compaction", prompt_tokens=100, model="cheap")) is s


def test_counts_and_model() -> None:
    s = advance(EMPTY, turn(model="m1", prompt_tokens=10, completion_tokens=2))
    s = advance(s, turn(tool_calls=(call("x", {}),), prompt_tokens=5))
    assert s.model == "m1"
    assert s.counts == Counts(turns=2, tool_calls=1, prompt_tokens=15, completion_tokens=2)


def test_state_from_events_is_one_turn_of_events() -> None:
    s = state_from([("intent", {"text": "fix it"}), ("file", {"path": "a", "op": "read"})])
    assert s.focus == "fix it" and s.files == (FileEntry("a", "read", 1),)


# -- properties ------------------------------------------------------------------------

TEXT = st.text("abcxyz /\n", min_size=0, max_size=12)
EVENTS = st.tuples(
    st.sampled_from(("intent", "file", "decision", "error", "feedback", "llm")),
    st.fixed_dictionaries({}, optional={"text": TEXT, "path": TEXT, "op": TEXT, "resolves": TEXT}),
)
CALLS = st.builds(
    lambda name, path, ok, result: call(name, {"path": path}, "ok" if ok else "error", result),
    st.sampled_from(("read", "write", "run")),
    TEXT,
    st.booleans(),
    TEXT,
)
TURNS = st.builds(
    TurnFacts,
    type=st.sampled_from(("turn", "queue_batch", "worker_result", "compaction")),
    status=st.sampled_from(("completed", "aborted", "failed")),
    error=st.none() | TEXT,
    model=st.none() | st.sampled_from(("m1", "m2")),
    inputs=st.lists(st.tuples(st.sampled_from(("person", "timer")), TEXT), max_size=3).map(tuple),
    tool_calls=st.lists(CALLS, max_size=4).map(tuple),
    events=st.lists(EVENTS, max_size=6).map(tuple),
    prompt_tokens=st.integers(0, 100),
    completion_tokens=st.integers(0, 100),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(TURNS, max_size=25))
def test_any_thread_keeps_the_records_invariants(turns: list[TurnFacts]) -> None:
    s = EMPTY
    for t in turns:
        before, s = s, advance(s, t)
        if t.type == "compaction":
            assert s is before
            continue
        assert s.counts.turns == before.counts.turns + 1
        assert s.counts.tool_calls == before.counts.tool_calls + len(t.tool_calls)
        assert loads(dumps(s)) == s  # what the ledger stores is the record itself
    assert len(s.files) <= MAX_FILES and len({f.path for f in s.files}) == len(s.files)
    assert len(s.decisions) <= MAX_DECISIONS
    assert len({d.text for d in s.decisions}) == len(s.decisions)
    assert len(s.errors) <= MAX_ERRORS and len({e.text for e in s.errors}) == len(s.errors)
    assert all(e.turn <= s.counts.turns for e in s.errors)
    assert [f.turn for f in s.files] == sorted(f.turn for f in s.files)


@settings(max_examples=100, deadline=None)
@given(st.lists(TURNS, max_size=12), st.integers(0, 12))
def test_a_fork_at_turn_k_has_exactly_the_first_k_turns_record(
    turns: list[TurnFacts], k: int
) -> None:
    """The record is a fold over the thread, so a fork continues from the
    record after its fork point, whatever the original thread did afterwards."""
    at_k = EMPTY
    for t in turns[:k]:
        at_k = advance(at_k, t)
    whole = at_k
    for t in turns[k:]:
        whole = advance(whole, t)
    fork = advance(at_k, TurnFacts("turn", "completed", inputs=(("person", "fork"),)))
    assert fork.counts.turns == at_k.counts.turns + 1
    assert {d.text for d in fork.decisions} <= {d.text for d in at_k.decisions}


# -- JSON and text ---------------------------------------------------------------------


def test_json_round_trip_and_shape() -> None:
    s = SessionState(
        focus="f",
        files=(FileEntry("a", "edit", 1),),
        decisions=(Decision("d", 2),),
        errors=(ErrorEntry("e", 3, True, "run {}"),),
        model="m",
        counts=Counts(3, 1, 10, 5),
    )
    data = to_json(s)
    assert set(data) == {"focus", "files", "decisions", "errors", "model", "counts"}
    assert from_json(data) == s and loads(dumps(s)) == s


def test_render() -> None:
    assert render(EMPTY) is None and EMPTY.render() is None
    s = advance(
        EMPTY,
        turn(
            inputs=(("person", "fix auth"),),
            model="m",
            events=(("decision", {"text": "use JWT"}), ("file", {"path": "a.py", "op": "edit"})),
        ),
    )
    text = render(s, "dm:ent_1")
    assert text is not None
    assert "session: dm:ent_1, model m, 1 turns" in text
    assert "current focus: fix auth" in text
    assert "- a.py (edit, turn 1)" in text and "- use JWT (turn 1)" in text
    short = render(s, "dm:ent_1", short=True)
    assert short is not None and "use JWT" not in short and "fix auth" in short


def test_render_both_is_render_whole_and_short() -> None:
    plain = advance(EMPTY, turn(inputs=(("person", "fix auth"),), model="m"))
    whole, short = render_both(plain, "dm:x")
    # No lists to leave out: the short form is the whole, so a context counts it once.
    assert whole is short and whole == render(plain, "dm:x") == render(plain, "dm:x", short=True)
    listed = advance(plain, turn(events=(("decision", {"text": "use JWT"}),)))
    whole, short = render_both(listed, "dm:x")
    assert whole is not None and short is not None and whole != short
    assert whole.startswith(short + "\n") and "use JWT" in whole and "use JWT" not in short
    assert render_both(EMPTY) == (None, None)


def test_a_record_without_lists_is_counted_as_its_text() -> None:
    ctx = SessionContext(TokenCounter())
    ctx.turn_committed(turn(inputs=(("person", "fix auth"),), model="m"), ())
    plan = plan_for(ctx, 4096)
    text = render(ctx.state, "dm:x")
    assert plan.state is not None and text is not None and plan.state.content == text
    assert plan.state.tokens == ctx.counter.count_message("system", text)


def test_first_line() -> None:
    assert first_line("\n\n  a  b \n c", 10) == "a b"
    assert first_line("", 5) == "" and first_line("abcdef", 4) == "abc…"


# -- in the context, within the budget ----------------------------------------------------


def big_state() -> SessionState:
    s = EMPTY
    for n in range(20):
        s = advance(s, turn(events=(("decision", {"text": f"decision number {n} " * 5}),)))
    return advance(s, turn(inputs=(("person", "what now"),)))


def plan_for(ctx: SessionContext, window: int) -> ContextPlan:
    return ctx.build(
        window=window,
        reserve=0,
        threshold=0.85,
        system=None,
        inputs=(ctx.msg("user", "hello"),),
        notes=(),
        label="dm:x",
    )


def test_a_tiny_budget_leaves_the_state_out_but_never_goes_over() -> None:
    ctx = SessionContext(TokenCounter(), state=big_state())
    whole, short = render(ctx.state, "dm:x"), render(ctx.state, "dm:x", short=True)
    assert whole is not None and short is not None
    count = ctx.counter.count_message
    need_input = count("user", "hello")
    roomy = plan_for(ctx, need_input + count("system", whole) + 10)
    assert roomy.state is not None and roomy.state.content == whole
    tight = plan_for(ctx, need_input + count("system", short) + 5)
    assert tight.state is not None and tight.state.content == short
    assert not tight.over_budget and tight.tokens <= tight.budget
    tiny = plan_for(ctx, need_input + 1)
    assert tiny.state is None and not tiny.over_budget and tiny.tokens <= tiny.budget


def test_a_bridge_note_goes_in_when_it_fits_and_is_remembered_as_shown() -> None:
    ctx = SessionContext(TokenCounter())
    ctx.add_bridges({"b1": "This person also talked with you in session dm:y."})
    plan = plan_for(ctx, 1000)
    assert plan.bridge is not None and "dm:y" in plan.bridge.content
    assert ctx.planned_bridges == ("b1",)
    ctx.turn_committed(TurnFacts("turn", "aborted"), ctx.planned_bridges)
    assert "b1" in ctx.bridges  # only a completed turn consumes it
    ctx.turn_committed(TurnFacts("turn", "completed"), ctx.planned_bridges)
    assert ctx.bridges == {}
    assert plan_for(ctx, 1000).bridge is None and not ctx.planned_bridges
    ctx.add_bridges({"b2": "x " * 400})
    assert plan_for(ctx, 50).bridge is None and not ctx.planned_bridges


# -- totals and merge patches (unchanged) ---------------------------------------------


def test_totals_of_events() -> None:
    events: list[tuple[str, dict[str, Any]]] = [
        ("file", {"path": "a", "op": "edit"}),
        ("error", {"text": "x"}),
        ("decision", {"text": "y", "resolves": "x"}),
    ]
    assert totals_of(events) == {
        "events": 3,
        "files_modified": 1,
        "errors": 1,
        "errors_resolved": 1,
    }


def test_merge_patch_rfc7396_examples() -> None:
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch({"a": [1]}, {"a": [2]}) == {"a": [2]}
    assert merge_patch(["a"], {"a": "b"}) == {"a": "b"}
    assert merge_patch({"a": "b"}, ["c"]) == ["c"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@given(
    st.dictionaries(st.text(max_size=3), JSON, max_size=4),
    st.dictionaries(st.text(max_size=3), JSON, max_size=4),
)
def test_merge_patch_is_idempotent(target: dict[str, Any], patch: dict[str, Any]) -> None:
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once
