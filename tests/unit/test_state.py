from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from broker.core.session_state import MAX_ITEMS, merge_patch, state_from, totals_of

EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("intent", {"text": "fix the login bug"}),
    ("file", {"path": "app/login.py", "op": "read"}),
    ("file", {"path": "app/login.py", "op": "edit"}),
    ("error", {"text": "test_login fails"}),
    ("decision", {"text": "hash with argon2", "resolves": "test_login fails"}),
    ("llm", {"model": "m"}),
]


def test_state_from_events() -> None:
    state = state_from(EVENTS)
    assert state.focus == "fix the login bug"
    assert state.files == ["app/login.py"]
    assert state.decisions == ["hash with argon2"]
    assert state.errors_resolved == ["test_login fails"]
    rendered = state.render()
    assert rendered is not None and "Current focus: fix the login bug" in rendered
    assert state_from([]).render() is None


def test_totals_of_events() -> None:
    assert totals_of(EVENTS) == {
        "events": 6,
        "files_modified": 1,
        "errors": 1,
        "errors_resolved": 1,
    }


def test_lists_are_bounded_newest_last() -> None:
    state = state_from(("file", {"path": f"f{n}"}) for n in range(MAX_ITEMS + 5))
    assert state.files == [f"f{n}" for n in range(5, MAX_ITEMS + 5)]


def test_merge_patch_rfc7396_examples() -> None:
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch({"a": [1]}, {"a": [2]}) == {"a": [2]}
    assert merge_patch(["a"], {"a": "b"}) == {"a": "b"}
    assert merge_patch({"a": "b"}, ["c"]) == ["c"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(
    st.dictionaries(st.text(max_size=3), json_values, max_size=4),
    st.dictionaries(st.text(max_size=3), json_values, max_size=4),
)
def test_merge_patch_is_idempotent(target: dict[str, Any], patch: dict[str, Any]) -> None:
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once
    assert all(once.get(k) is not None for k, v in patch.items() if v is not None)
    assert all(k not in once for k, v in patch.items() if v is None)
