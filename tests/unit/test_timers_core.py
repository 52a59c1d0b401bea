"""Timer scheduling (core/timers.py) on a fake clock: specs, due times, and
missed firings collapsed, including across a daemon that was down."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.timers import (
    MIN_EVERY_S,
    TimerSpecError,
    fire,
    is_system_label,
    msg_id,
    next_after,
    parse_at,
    parse_spec,
)

NOW = 1_800_000_000_000  # ms: a fixed "now" for every example


class FakeClock:
    """A wall clock in ms that only moves when told."""

    def __init__(self, now: int) -> None:
        self.now = now

    def advance(self, seconds: float) -> int:
        self.now += round(seconds * 1000)
        return self.now


def run_timer(next_at: int, every_ms: int | None, wakes: list[int]) -> list[tuple[int, int]]:
    """Step a timer through the wheel's wake-ups; the (n, due_at) of each firing."""
    fired, out = 0, []
    for now in wakes:
        firing = fire(next_at, every_ms, fired, now) if next_at is not None else None
        if firing is None:
            continue
        out.append((firing.n, firing.due_at))
        fired = firing.n
        if firing.next_at is None:
            next_at = None  # type: ignore[assignment]
            break
        next_at = firing.next_at
    return out


# -- specs ------------------------------------------------------------


def test_in_s_and_every_s_make_a_spec() -> None:
    spec = parse_spec("ping", 5, None, 60, NOW)
    assert (spec.text, spec.first_at, spec.every_ms) == ("ping", NOW + 5000, 60_000)
    assert parse_spec("ping", 0.25, None, None, NOW).first_at == NOW + 250
    assert parse_spec("ping", 0, None, MIN_EVERY_S, NOW).every_ms == 1000


def test_at_takes_rfc_3339_with_an_offset() -> None:
    assert parse_at("2027-01-15T08:00:00Z") == NOW
    assert parse_at("2027-01-15T09:00:00+01:00") == parse_at("2027-01-15T08:00:00Z")
    assert parse_at("2027-01-15t08:00:00.5z") == parse_at("2027-01-15T08:00:00Z") + 500


@pytest.mark.parametrize(
    ("text", "in_s", "at", "every_s", "field"),
    [
        ("ping", None, None, None, "in_s"),  # neither
        ("ping", 5, "2027-01-15T08:00:00Z", None, "in_s"),  # both
        ("ping", -1, None, None, "in_s"),  # negative
        ("ping", float("nan"), None, None, "in_s"),
        ("ping", float("inf"), None, None, "in_s"),
        ("ping", "5", None, None, "in_s"),  # a string is not a number
        ("ping", True, None, None, "in_s"),  # nor is a boolean
        ("ping", 5, None, 0.999, "every_s"),  # under a second
        ("ping", 5, None, 0, "every_s"),
        ("ping", 5, None, -60, "every_s"),
        ("ping", 5, None, "60", "every_s"),
        ("ping", None, "tomorrow", None, "at"),
        ("ping", None, "2027-01-15", None, "at"),  # a date only
        ("ping", None, "2027-01-15T08:00:00", None, "at"),  # no offset
        ("ping", None, "2027-02-30T08:00:00Z", None, "at"),  # no such day
        ("ping", None, 1_800_000_000, None, "at"),  # a number is not RFC 3339
        ("", 5, None, None, "text"),
        ("   ", 5, None, None, "text"),
        (None, 5, None, None, "text"),
    ],
)
def test_a_bad_spec_names_its_field(
    text: object, in_s: object, at: object, every_s: object, field: str
) -> None:
    with pytest.raises(TimerSpecError) as caught:
        parse_spec(text, in_s, at, every_s, NOW)
    assert caught.value.field == field


# -- due times ----------------------------------------------------------


def test_a_one_shot_fires_once_at_its_time_and_not_before() -> None:
    clock = FakeClock(NOW)
    spec = parse_spec("once", 10, None, None, clock.now)
    assert fire(spec.first_at, None, 0, clock.advance(9.999)) is None
    firing = fire(spec.first_at, None, 0, clock.advance(0.001))
    assert firing is not None and (firing.n, firing.due_at, firing.next_at) == (
        1,
        NOW + 10_000,
        None,
    )


def test_at_in_the_past_fires_at_once() -> None:
    for at in ("2020-01-01T00:00:00Z", "1969-12-31T23:59:59Z"):
        spec = parse_spec("late", None, at, None, NOW)
        firing = fire(spec.first_at, None, 0, NOW)
        assert firing is not None and firing.n == 1 and firing.next_at is None
    assert parse_at("1969-12-31T23:59:59Z") == -1000


def test_every_s_boundaries_keep_to_the_grid() -> None:
    every = 1000
    # Exactly on a due time: that one fires, the next is one period on.
    assert next_after(NOW, every, NOW) == NOW + 1000
    assert next_after(NOW, every, NOW + 999) == NOW + 1000
    assert next_after(NOW, every, NOW + 1000) == NOW + 2000
    # Before the first due time, the first due time.
    assert next_after(NOW, every, NOW - 5) == NOW
    # A late wake-up does not shift the grid.
    firing = fire(NOW, every, 0, NOW + 1_300)
    assert firing is not None and firing.next_at == NOW + 2000


def test_missed_firings_across_a_restart_fire_once_then_go_on() -> None:
    """Daemon down for five periods: one firing at start, then the next due time
    after 'now' on the original grid, then one a period."""
    every = 60_000
    clock = FakeClock(NOW)
    fired = fire(NOW, every, 0, clock.now)  # fires on time before the crash
    assert fired is not None and fired.next_at == NOW + 60_000
    clock.advance(5 * 60 + 17)  # down for five due times and a bit
    at_start = fire(fired.next_at, every, fired.n, clock.now)
    assert at_start is not None
    assert (at_start.n, at_start.due_at) == (2, NOW + 60_000)  # the oldest missed one names it
    assert at_start.next_at == NOW + 6 * 60_000
    assert fire(at_start.next_at, every, at_start.n, clock.now) is None  # nothing else owed
    assert fire(at_start.next_at, every, at_start.n, clock.advance(43)) is not None


def test_a_long_quiet_period_without_a_restart_still_fires() -> None:
    """The wheel wakes at each due time however long nothing else happened."""
    every = 3_600_000
    wakes = [NOW + k * every for k in range(0, 24 * 30)]  # an hourly timer for 30 days
    firings = run_timer(NOW, every, wakes)
    assert [n for n, _ in firings] == list(range(1, 24 * 30 + 1))
    assert [due for _, due in firings] == wakes


@given(
    every_ms=st.integers(min_value=1000, max_value=86_400_000),
    gaps=st.lists(st.integers(min_value=0, max_value=10 * 86_400_000), min_size=1, max_size=40),
)
def test_any_wake_pattern_fires_numbered_firings_at_most_once_per_due_time(
    every_ms: int, gaps: list[int]
) -> None:
    wakes, now = [], NOW
    for gap in gaps:
        now += gap
        wakes.append(now)
    firings = run_timer(NOW, every_ms, wakes)
    # Numbered 1, 2, ... with no gap; each stands for a distinct due time on the
    # grid, at or before the wake that fired it; at most one firing per wake.
    assert [n for n, _ in firings] == list(range(1, len(firings) + 1))
    dues = [due for _, due in firings]
    assert dues == sorted(set(dues))
    assert all((due - NOW) % every_ms == 0 for due in dues)
    assert len(firings) <= len(wakes)
    # A wake fires exactly when a due time passed since the wake before it (the
    # missed ones collapse into that one firing): none is lost, none doubled.
    assert len(firings) == sum(
        1
        for i, now in enumerate(wakes)
        if now >= NOW
        and (
            i == 0
            or wakes[i - 1] < NOW
            or (now - NOW) // every_ms > (wakes[i - 1] - NOW) // every_ms
        )
    )


def test_firings_are_named_by_timer_and_number() -> None:
    assert msg_id("tmr_01", 3) == "timer:tmr_01:3"


@pytest.mark.parametrize(
    ("label", "ok"),
    [
        ("system:heartbeat", True),
        ("system:daily-digest.v2", True),
        ("system:", False),
        ("system:Heartbeat", False),
        ("system:a b", False),
        ("dm:ent_01", False),
        ("heartbeat", False),
    ],
)
def test_system_labels(label: str, ok: bool) -> None:
    assert is_system_label(label) is ok
