"""The pure rules of merge proposals (core/proposals.py) and of reaching an entity
(core/reach.py `may_reach_entity`), stepped without a ledger."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.proposals import USAGE, Decided, check_proposal, decide, parse_verdict
from core.reach import may_reach_entity

ENTITIES = st.sampled_from(["e1", "e2", "e3"])
OWNERS = st.one_of(
    st.none(),
    st.tuples(st.just("entity"), ENTITIES),
    st.tuples(st.just("session"), st.sampled_from(["group:chat:g"])),
)


@given(st.lists(st.booleans(), min_size=1, max_size=8))
def test_a_proposal_is_decided_by_its_first_decision_alone(verdicts: list[bool]) -> None:
    status = "pending"
    moves = 0
    for accept in verdicts:
        try:
            status = decide(status, accept)
            moves += 1
        except Decided:
            pass
    assert moves == 1
    assert status == ("accepted" if verdicts[0] else "rejected")


@given(st.booleans(), st.integers(min_value=1, max_value=2**62))
def test_merge_words_round_trip(accept: bool, n: int) -> None:
    assert parse_verdict(f"  {'YES' if accept else 'no'}   {n} ") == (accept, n)


@pytest.mark.parametrize("words", ["", "yes", "yes x", "maybe 3", "yes 0", "yes -1", "yes 1 2"])
def test_malformed_merge_words_say_how(words: str) -> None:
    with pytest.raises(ValueError, match="usage"):
        parse_verdict(words)
    assert USAGE.startswith("usage: /merge")


def test_a_proposal_s_arguments_are_checked() -> None:
    assert check_proposal(" e1 ", "e2", "same\n  phone") == ("e1", "e2", "same phone")
    for bad in (("e1", "e1", "x"), ("", "e2", "x"), ("e1", None, "x"), ("e1", "e2", " ")):
        with pytest.raises(ValueError, match=r"'contact'|'person'|'reason'"):
            check_proposal(*bad)


@given(OWNERS, st.one_of(st.none(), ENTITIES), st.booleans(), st.sampled_from(["own", "any"]))
def test_an_entity_is_reached_only_as_its_owner_a_fellow_or_with_reach_any(
    actor: tuple[str, str] | None, root: str | None, heard: bool, reach: str
) -> None:
    got = may_reach_entity(actor, root, heard, reach)  # type: ignore[arg-type]
    if root is None or actor is None:
        assert not got  # no such entity, or no one acting: never
    elif reach == "own":
        assert got == (actor == ("entity", root) or heard)
    else:
        assert got
