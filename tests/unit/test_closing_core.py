"""core/closing.py stepped synchronously: the successor walk (stable, stepping over
labels that are not the chain's), the mechanical summary and the close refusal; and
core/titles.py's session title and slug (seed 000's rule)."""

from __future__ import annotations

import pytest

from core.closing import (
    MAX_SUMMARY,
    Held,
    IdleClose,
    close_refusal,
    idle_cutoff,
    mechanical_summary,
    successor,
)
from core.titles import MAX_SLUG, session_slug, session_title, slugify


def test_the_first_successor_is_new() -> None:
    nxt = successor("dm:ent_a", lambda label: None)
    assert (nxt.label, nxt.extends, nxt.create) == ("dm:ent_a~2", "dm:ent_a", True)


def test_the_walk_goes_past_closed_successors_to_the_open_one() -> None:
    held = {
        "dm:ent_a~2": Held("closed", "dm:ent_a"),
        "dm:ent_a~3": Held("active", "dm:ent_a~2"),
    }
    nxt = successor("dm:ent_a", held.get)
    assert (nxt.label, nxt.extends, nxt.create) == ("dm:ent_a~3", "dm:ent_a~2", False)
    held["dm:ent_a~3"] = Held("closed", "dm:ent_a~2")
    nxt = successor("dm:ent_a", held.get)
    assert (nxt.label, nxt.extends, nxt.create) == ("dm:ent_a~4", "dm:ent_a~3", True)


@pytest.mark.parametrize("taken", [Held("active", None), Held("alias", None), Held("active", "x")])
def test_a_label_not_of_the_chain_is_stepped_over(taken: Held) -> None:
    nxt = successor("dm:ent_a", {"dm:ent_a~2": taken}.get)
    assert (nxt.label, nxt.extends, nxt.create) == ("dm:ent_a~3", "dm:ent_a", True)


def test_the_mechanical_summary_names_the_titles_within_its_bound() -> None:
    assert mechanical_summary([], 0) == "Closed with no turns."
    assert mechanical_summary([None, " "], 2) == "Closed after 2 turn(s)."
    assert mechanical_summary(["Plan", None, "Book"], 3) == "Closed after 3 turn(s): Plan; Book."
    long = mechanical_summary([f"title number {n}" for n in range(1000)], 1000)
    assert len(long) <= MAX_SUMMARY and long.endswith("; …")
    older = mechanical_summary(["Plan", "Book"], 2, more=True)
    assert older == "Closed after more than 2 turn(s), the latest: Plan; Book."


def test_close_refusal_names_what_is_pending() -> None:
    assert close_refusal(0, 0, 0) is None
    reason = close_refusal(2, 1, 3)
    assert reason is not None
    assert "1 running item(s), 2 queued item(s), 3 live timer(s)" in reason


def test_session_title_and_slug_from_the_first_message() -> None:
    text = "Fix the JWT refresh bug in the auth middleware, please!\nmore"
    assert session_title(text) == "Fix the JWT refresh bug in the auth middleware, please!"
    slug = session_slug(text, "dm:ent_a")
    assert slug == "fix-the-jwt-refresh-bug-in-the" and len(slug) <= MAX_SLUG
    assert slugify("Café à Lisbonne") == "cafe-a-lisbonne"
    assert session_title("   ") is None


def test_a_vague_message_gets_the_stable_fallback_slug() -> None:
    fallback = session_slug("?!", "dm:ent_a")
    assert fallback.startswith("session-") and len(fallback) == len("session-") + 8
    assert session_slug("ok", "dm:ent_a") == fallback  # stable for the label
    assert session_slug("ok", "dm:ent_b") != fallback


def test_idle_close_groups_each_persona_with_its_limit_then_the_rest() -> None:
    assert not IdleClose().active and IdleClose().groups() == []
    policy = IdleClose(3600.0, (("brief", 60.0), ("keeper", 0.0)))
    assert policy.active
    assert policy.groups() == [(("brief",), 60.0), (None, 3600.0)]  # keeper: never
    assert policy.overridden() == ("brief", "keeper")  # the default is not theirs
    assert [policy.limit_for(p) for p in ("brief", "keeper", "other", None)] == [
        60.0,
        0.0,
        3600.0,
        3600.0,
    ]
    only_persona = IdleClose(0.0, (("brief", 60.0),))
    assert only_persona.active and only_persona.groups() == [(("brief",), 60.0)]
    assert not IdleClose(0.0, (("keeper", 0.0),)).active


def test_the_idle_cutoff_is_the_limit_before_now_in_ms() -> None:
    assert idle_cutoff(60.0, 1_000_000) == 940_000
    assert idle_cutoff(0.25, 1_000) == 750
