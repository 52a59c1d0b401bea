"""The pure rules of route bindings (core/bindings.py): owners, refusals, and
where a stored binding leads."""

from __future__ import annotations

import pytest

from core.bindings import (
    Conversation,
    Owner,
    SessionLink,
    bound_label,
    owner_of,
    refusal,
)
from core.identity import SessionRef

SESSIONS = {
    s.label: s
    for s in (
        SessionLink("dm:ent_a", "dm", "ent_a", None),
        SessionLink("dm:ent_b", "dm", "ent_b", None),  # ent_b was merged into ent_a
        SessionLink("dm:ent_c", "dm", "ent_c", None),
        SessionLink("fork:1", "fork", None, "dm:ent_a"),
        SessionLink("fork:2", "fork", None, "fork:1"),
        SessionLink("worker:1", "worker", None, "fork:2"),
        SessionLink("group:sms:g", "group", None, None),
        SessionLink("fork:g", "fork", None, "group:sms:g"),
        SessionLink("fork:orphan", "fork", None, "dm:gone"),
        SessionLink("fork:loop1", "fork", None, "fork:loop2"),
        SessionLink("fork:loop2", "fork", None, "fork:loop1"),
    )
}
ROOTS = {"ent_a": "ent_a", "ent_b": "ent_a", "ent_c": "ent_c"}


def owner(label: str) -> Owner | None:
    return owner_of(label, SESSIONS.get, ROOTS.__getitem__)


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("dm:ent_a", ("entity", "ent_a")),
        ("dm:ent_b", ("entity", "ent_a")),  # merged: the canonical root owns it
        ("fork:1", ("entity", "ent_a")),
        ("fork:2", ("entity", "ent_a")),  # a fork of a fork
        ("worker:1", ("entity", "ent_a")),
        ("group:sms:g", ("session", "group:sms:g")),
        ("fork:g", ("session", "group:sms:g")),
        ("fork:orphan", ("session", "fork:orphan")),  # its origin is gone: it stands alone
        ("fork:loop1", ("session", "fork:loop2")),  # a cycle ends the walk, not the process
        ("dm:nobody", None),
    ],
)
def test_owner_of_a_session(label: str, expected: tuple[str, str] | None) -> None:
    assert owner(label) == expected


def test_refusal_allows_only_the_same_owner() -> None:
    mine = owner("dm:ent_a")
    assert refusal(mine, "fork:2", owner("fork:2")) is None
    assert refusal(mine, "dm:ent_b", owner("dm:ent_b")) is None
    assert refusal(mine, "dm:ent_c", owner("dm:ent_c")) == "dm:ent_c is not one of your sessions."
    assert refusal(mine, "fork:g", owner("fork:g")) is not None
    assert refusal(mine, "dm:x", None) == "There is no session named dm:x."
    assert refusal(None, "fork:1", owner("fork:1")) is not None  # an unknown conversation


def test_a_binding_leads_to_an_active_session_through_merges_only() -> None:
    refs = {
        "a": SessionRef("a", "active", None),
        "m": SessionRef("m", "merged", "a"),
        "mm": SessionRef("mm", "merged", "m"),
        "c": SessionRef("c", "closed", None),
        "x": SessionRef("x", "merged", "y"),  # merged into a session that is gone
        "l1": SessionRef("l1", "merged", "l2"),
        "l2": SessionRef("l2", "merged", "l1"),
    }
    lead = [bound_label(refs.get(k), refs.get) for k in ("a", "m", "mm", "c", "x", "l1")]
    assert lead == ["a", "a", "a", None, None, None]
    assert bound_label(None, refs.get) is None


def test_a_conversation_without_a_thread_has_an_empty_thread_in_its_key() -> None:
    assert Conversation("sms", "dm", "+1", None).key() == ("sms", "dm", "+1", "")
    assert Conversation("sms", "group", "g", "t").key() == ("sms", "group", "g", "t")
