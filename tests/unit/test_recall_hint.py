"""The recall hint's pure part (core/recall_hint.py): which terms of a message are
looked up, and the one line a turn gets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.recall_hint import MAX_TERMS, REFERRING, candidates, hint_line, select


@pytest.mark.parametrize(
    ("message", "terms"),
    [
        ("where is vault/prod-keys.yaml again?", ["vault/prod-keys.yaml"]),
        ("Ask Marta about the JWT refresh in auth.py", ["Marta", "JWT", "auth.py"]),
        ("use parse_config and MyWidget, not myHelper", ["parse_config", "MyWidget", "myHelper"]),
        ("the launch code is zebra-42", ["zebra-42"]),
        ('run `make deploy` then "blue sky" mode', ["make deploy", "blue sky"]),
        ("Hello there. Thanks! The end.", []),  # capitals that start sentences name nothing
        ("I met Bob on Monday", ["Bob"]),  # "I" and weekdays are not names
        ("what should we do next", []),
    ],
)
def test_candidates_are_names_paths_identifiers_and_quotes(message: str, terms: list[str]) -> None:
    assert candidates(message) == terms


def test_terms_the_context_holds_are_not_asked_about() -> None:
    query = select("Ask Marta about auth.py and JWT", "... marta said the jwt expires ...")
    assert query.terms == ("auth.py",)
    assert query.refers_back is None


def test_terms_are_kept_once_in_order_and_at_most_max() -> None:
    message = " ".join(f"file{n}.py file{n}.py" for n in range(MAX_TERMS + 3))
    query = select(message, "")
    assert query.terms == tuple(f"file{n}.py" for n in range(MAX_TERMS))


def test_a_phrase_that_refers_back_is_noticed_with_or_without_terms() -> None:
    assert select("Like we discussed, do it", "").refers_back == "like we discussed"
    assert select("do what we did earlier", "").refers_back == "earlier"
    assert select("do it now", "").empty


def test_the_hint_line() -> None:
    named = hint_line(["auth.py", "Marta"], None, older_turns=True)
    assert named is not None and '"auth.py", "Marta"' in named and "conversation_recall" in named
    assert "\n" not in named
    back = hint_line([], "like we discussed", older_turns=True)
    assert back is not None and "like we discussed" in back
    assert hint_line([], "like we discussed", older_turns=False) is None
    assert hint_line([], None, older_turns=True) is None


def test_with_recall_by_meaning_the_hint_points_at_mode_both() -> None:
    named = hint_line(["auth.py"], None, older_turns=True, meaning=True)
    assert named is not None and "conversation_recall (action 'search', mode 'both')" in named
    back = hint_line([], "like we discussed", older_turns=True, meaning=True)
    assert back is not None and "mode 'both': it also finds them said in other words" in back
    plain = hint_line([], "like we discussed", older_turns=True)
    assert plain is not None and "mode" not in plain


WORDS = st.sampled_from(
    ["auth.py", "Marta", "the", "src/app/main.rs", "parse_config", "hello", "JWT", "x-1",
     "`make it`", "\"a phrase\"", ".", "?", "\n", "like we discussed", "Earlier", "v2", "ok"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(WORDS, max_size=30), st.lists(WORDS, max_size=10))
def test_selected_terms_come_from_the_message_and_are_not_in_the_context(
    message_words: list[str], context_words: list[str]
) -> None:
    message, context = " ".join(message_words), " ".join(context_words).lower()
    query = select(message, context)
    assert len(query.terms) <= MAX_TERMS
    assert len({t.lower() for t in query.terms}) == len(query.terms)
    for term in query.terms:
        assert term in message and term.lower() not in context
    assert (query.refers_back is None) == all(p not in message.lower() for p in REFERRING)
