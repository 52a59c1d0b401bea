"""core/rescan.py: which open items a node hands over again."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from core.rescan import look

ids = st.frozensets(st.sampled_from("abcdefgh"))


def test_an_item_open_at_two_looks_and_never_landed_here_is_handed_over_again() -> None:
    assert look({"a"}, {"a"}, set()).again == {"a"}


def test_an_item_acked_since_the_last_look_waits_for_the_next() -> None:
    first = look({"a"}, set(), set())
    assert first.again == frozenset()
    assert look({"a"}, first.open_before, first.landed).again == {"a"}


def test_an_item_this_node_landed_is_never_handed_over_again() -> None:
    assert look({"a", "b"}, {"a", "b"}, {"a"}).again == {"b"}


def test_a_landed_item_no_longer_open_is_forgotten() -> None:
    assert look({"b"}, {"a", "b"}, {"a", "b"}).landed == {"b"}


@given(ids, ids, ids)
def test_again_is_what_stayed_open_less_what_landed(
    now: frozenset[str], before: frozenset[str], landed: frozenset[str]
) -> None:
    found = look(now, before, landed)
    assert found.again == (now & before) - landed
    assert found.open_before == now
    assert found.landed == landed & now
    assert found.again <= now and found.landed <= now
