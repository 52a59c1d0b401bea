"""Counting a text line by line (broker/context/tokens.py) and the state record's
message counted that way (broker/context/session.py): always the whole's count."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.context import TokenCounter
from broker.context.session import SessionContext
from broker.context.tokens import DIGIT_RUN_ENCODINGS, MAX_KNOWN_LINES, split_lines
from core.packing import ContextPlan
from core.session_state import EMPTY, TurnFacts, advance, render

COUNTER = TokenCounter()

# Every kind of character the encodings' pre-tokenizer treats apart, newlines often.
pieces = [*"ab Zé9-/)'\r\t:.,_ß", "\n", "\n-", "\n ", "'s", "\n\n", "word", "123456"]
texts = st.lists(st.sampled_from(pieces), max_size=40).map("".join)


@settings(max_examples=400, deadline=None)
@given(texts)
def test_a_text_counted_by_lines_counts_as_the_whole(text: str) -> None:
    known: dict[str | bytes, int] = {}
    assert "".join(split_lines(text)) == text
    assert COUNTER.count_lines(text, known) == COUNTER.count(text)
    assert COUNTER.count_lines(text, known) == COUNTER.count(text)  # from what it knows


# Lines as a renderer makes them: each after the first begins with a letter or `-`.
rendered_lines = st.lists(
    st.tuples(st.sampled_from(["a", "Z", "é", "-", "ß"]), texts).map("".join), min_size=1
)


@settings(max_examples=400, deadline=None)
@given(texts, rendered_lines)
def test_lines_counted_joined_count_as_their_text(first: str, rest: list[str]) -> None:
    lines = [first, *rest]
    known: dict[str | bytes, int] = {}
    whole = COUNTER.count("\n".join(lines))
    assert COUNTER.count_joined(lines, known) == whole
    assert COUNTER.count_joined(lines, known) == whole  # from what it knows
    assert COUNTER.count_joined([first], known) == COUNTER.count(first)


# digit runs of every length beside everything the pre-tokenizer treats apart.
digit_texts = st.lists(
    st.one_of(st.sampled_from(pieces), st.from_regex(r"[0-9]{1,12}", fullmatch=True)),
    max_size=30,
).map("".join)


@settings(max_examples=600, deadline=None)
@given(digit_texts, digit_texts)
def test_lines_that_differ_in_their_digits_count_as_themselves(a: str, b: str) -> None:
    known: dict[str | bytes, int] = {}
    for text in (a, b, a + b, b):  # each from what the others left known
        assert COUNTER.count_lines(text, known) == COUNTER.count(text)


@pytest.mark.parametrize("encoding", sorted(DIGIT_RUN_ENCODINGS))
def test_each_piece_of_one_to_three_digits_is_one_token(encoding: str) -> None:
    counter = TokenCounter(encoding)
    pieces_ = [f"{n:0{width}d}" for width in (1, 2, 3) for n in range(10**width)]
    assert len(pieces_) == 1110
    assert all(counter.count(p) == 1 for p in pieces_)
    # And a run is cut into pieces of three from its start, apart from its neighbours.
    assert counter.count("a1234567b") == counter.count("a0b") + 2
    assert counter.count("a1234567b") == counter.count("a0000000b")


def test_the_counts_line_of_each_turn_is_known_after_the_first() -> None:
    known: dict[str | bytes, int] = {}
    for n in (100, 117, 129, 142):  # numbers of the same lengths: one form
        text = f"session: dm:x, {n} turns, {n * 7} prompt and {n * 3} completion tokens"
        assert COUNTER.count_lines(text, known) == COUNTER.count(text)
    assert len(known) == 1


def test_lines_are_cut_only_before_a_letter_or_a_dash() -> None:
    assert split_lines("a)\nb\n- c\n d\n\n/e\nf") == ["a)\n", "b\n", "- c\n d\n\n/e\n", "f"]


def test_the_lines_known_stay_bounded() -> None:
    known: dict[str | bytes, int] = {}
    for n in range(MAX_KNOWN_LINES * 2):
        COUNTER.count_lines(f"line {n}\nsame", known)
    assert len(known) <= MAX_KNOWN_LINES


def plan(ctx: SessionContext, label: str = "dm:x", window: int = 100_000) -> ContextPlan:
    return ctx.build(
        window=window,
        reserve=0,
        threshold=0.85,
        system=None,
        inputs=(ctx.msg("user", "hello"),),
        notes=(),
        label=label,
    )


@pytest.mark.parametrize("label", ["dm:x", None])
def test_the_state_record_in_the_context_counts_as_its_whole_text(label: str | None) -> None:
    ctx = SessionContext(TokenCounter())
    assert plan(ctx, label or "dm:x").state is None  # an empty record is left out
    for n in range(30):
        events = (("decision", {"text": f"decision {n}: keep it\n  short"}),) if n % 3 else ()
        facts = TurnFacts(
            "turn",
            "failed" if n % 7 == 0 else "completed",
            error="boom (it broke)" if n % 7 == 0 else None,
            inputs=(("person", f"question {n}? über-long\n\nsecond line"),),
            events=events,
            prompt_tokens=n * 11,
        )
        ctx.turn_committed(facts, ())
        p = plan(ctx, label or "dm:x")
        whole = render(ctx.state, label or "dm:x")
        assert p.state is not None and p.state.content == whole
        assert p.state.tokens == COUNTER.count_message("system", whole)
        short = render(ctx.state, label or "dm:x", short=True)
        assert short is not None  # and the short form when the whole does not fit:
        window = COUNTER.count_message("system", short) + 20
        short_msg = plan(ctx, label or "dm:x", window=window).state
        assert short_msg is not None and short_msg.content in (short, whole)
        assert short_msg.tokens == COUNTER.count_message("system", short_msg.content)


def test_an_unchanged_record_is_not_rendered_again() -> None:
    ctx = SessionContext(TokenCounter())
    ctx.turn_committed(TurnFacts("turn", "completed", inputs=(("person", "hi"),)), ())
    first = plan(ctx).state
    assert first is not None and plan(ctx).state is first
    ctx.turn_committed(TurnFacts("turn", "completed", inputs=(("person", "hi"),)), ())
    again = plan(ctx).state
    assert again is not None and again is not first and "2 turns" in again.content
    assert ctx.state != EMPTY and advance(EMPTY, TurnFacts("compaction", "completed")) == EMPTY
