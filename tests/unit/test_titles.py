"""core/titles.py: a turn's title and outcome as short lines."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.titles import (
    MAX_OUTCOME,
    MAX_TITLE,
    engine_title,
    mechanical_title,
    one_line,
    outcome_line,
    turn_title,
)


def test_the_first_line_of_the_message_names_the_turn() -> None:
    assert mechanical_title(["Fix the login bug\nit fails on Safari"], "Done.") == (
        "Fix the login bug"
    )


def test_blank_lines_and_runs_of_spaces_do_not_count() -> None:
    assert mechanical_title(["\n  \n  please   check\tthe logs  "], "") == "please check the logs"


def test_a_long_line_is_cut_at_a_word_with_an_ellipsis() -> None:
    words = "word " * 40
    title = mechanical_title([words], "")
    assert len(title) <= MAX_TITLE and title.endswith("…")
    assert title[:-1].split() == ["word"] * len(title[:-1].split())


def test_a_word_longer_than_the_limit_is_cut_inside_it() -> None:
    assert one_line("x" * 200, 10) == "x" * 9 + "…"


@given(st.text(alphabet=st.sampled_from("ab \t\n\r\x0b\x85\u2028\u3000")))
def test_one_line_is_the_first_line_with_words_its_spaces_collapsed(text: str) -> None:
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    assert one_line(text, 10_000) == " ".join(first.split())


def test_several_messages_say_how_many_more() -> None:
    assert mechanical_title(["first one", "second", "third"], "") == "first one (+2 more)"
    assert mechanical_title(["only this", "   "], "") == "only this"


def test_a_turn_without_a_message_is_named_by_its_reply() -> None:
    assert mechanical_title([], "\nThe worker found 3 bugs.\nDetails…") == (
        "The worker found 3 bugs."
    )
    assert mechanical_title(["  "], "a reply") == "a reply"


def test_a_turn_with_neither_is_named_by_its_type() -> None:
    assert mechanical_title([], "The summary: …", "compaction") == "Compaction of earlier turns"
    assert mechanical_title([], "", "worker_result") == "A worker_result with no text"


def test_an_engine_intent_with_a_title_wins_the_latest_one() -> None:
    events: list[tuple[str, dict[str, Any]]] = [
        ("intent", {"by": "broker", "inputs": []}),
        ("intent", {"title": "Look into the bug"}),
        ("decision", {"title": "not an intent"}),
        ("intent", {"title": "Fix the login bug\nin auth.py"}),
        ("intent", {"title": "   "}),
        ("intent", {"title": 7}),
    ]
    assert engine_title(events) == "Fix the login bug"
    assert turn_title(["hello"], "hi", events) == ("Fix the login bug", "engine")
    assert turn_title(["hello"], "hi", events[:1]) == ("hello", "mechanical")
    assert engine_title([]) is None


def test_outcomes() -> None:
    assert outcome_line("completed", None, None) == "completed"
    assert outcome_line("aborted", "interrupt", None) == "aborted (interrupt)"
    assert outcome_line("aborted", "crash", "the broker stopped while this turn ran") == (
        "aborted (crash): the broker stopped while this turn ran"
    )
    assert outcome_line("failed", None, "") == "failed"
    long = outcome_line("failed", "engine", "because " * 100)
    assert long.startswith("failed (engine): because") and len(long) <= MAX_OUTCOME


@given(st.lists(st.text(), max_size=4), st.text(), st.sampled_from(["turn", "compaction"]))
def test_a_title_is_one_short_non_empty_line(inputs: list[str], reply: str, kind: str) -> None:
    title = mechanical_title(inputs, reply, kind)
    assert title and len(title) <= MAX_TITLE
    assert len(title.splitlines()) == 1 and title == title.strip()


@given(st.sampled_from(["completed", "aborted", "failed"]), st.none() | st.text(), st.text())
def test_an_outcome_is_one_bounded_line(status: str, reason: str | None, error: str) -> None:
    line = outcome_line(status, reason, error)
    assert line.startswith(status) and len(line.splitlines()) == 1
    assert len(line) <= MAX_OUTCOME


def test_titles_engine_must_be_a_configured_engine() -> None:
    from broker.config import ConfigError, Settings, check_personas

    assert Settings().titles.engine == ""  # off by default
    with pytest.raises(ConfigError, match=r"titles\.engine names 'cheap'"):
        check_personas(Settings(titles={"engine": "cheap"}))
    check_personas(Settings(titles={"engine": "cheap"}, engines={"cheap": {"kind": "echo"}}))
