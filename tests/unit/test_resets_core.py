"""The reset decision (core/resets.py) on a fake clock: idle, daily (across
DST changes: days of 23 and 25 hours, a `daily_at` the clock skips or shows twice)
and turn limits."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.resets import (
    ResetPolicy,
    ResetPolicyError,
    check,
    daily_moment,
    decide,
    last_daily_moment,
    parse_daily_at,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")  # DST moves the clock by 30 minutes
H = 3_600_000  # ms in an hour


def ms(text: str) -> int:
    """An RFC 3339 time as UTC ms."""
    return int(datetime.fromisoformat(text).timestamp() * 1000)


class FakeClock:
    def __init__(self, now: int) -> None:
        self.now = now

    def advance(self, seconds: float) -> int:
        self.now += round(seconds * 1000)
        return self.now


# -- idle and turn limits --------------------------------------------------------


def test_idle_counts_from_the_last_activity() -> None:
    policy = ResetPolicy(idle_s=600)
    clock = FakeClock(ms("2026-06-01T12:00:00+00:00"))
    since = clock.now
    assert decide(policy, since, 3, clock.advance(599.999), UTC) is None
    assert decide(policy, since, 3, clock.advance(0.001), UTC) == "idle"


def test_nothing_is_stale_in_a_thread_that_never_heard_anyone() -> None:
    policy = ResetPolicy(idle_s=1, daily_at="04:00")
    assert decide(policy, None, 0, ms("2030-01-01T12:00:00+00:00"), UTC) is None


def test_a_thread_rolls_over_once_it_reached_max_turns() -> None:
    policy = ResetPolicy(max_turns=3)
    now = ms("2026-06-01T12:00:00+00:00")
    assert decide(policy, now, 2, now, UTC) is None
    assert decide(policy, now, 3, now, UTC) == "turn_limit"
    assert decide(policy, None, 7, now, UTC) == "turn_limit"


def test_zero_turns_every_reason_off() -> None:
    now = ms("2026-06-01T12:00:00+00:00")
    assert not ResetPolicy().active
    assert decide(ResetPolicy(), now - 10**12, 10**6, now, UTC) is None


def test_reasons_are_tried_idle_then_daily_then_turn_limit() -> None:
    now = ms("2026-06-02T12:00:00+00:00")
    since = ms("2026-06-01T12:00:00+00:00")
    every = ResetPolicy(idle_s=60, daily_at="04:00", max_turns=1)
    assert decide(every, since, 5, now, UTC) == "idle"
    assert decide(every._replace(idle_s=0), since, 5, now, UTC) == "daily"
    assert decide(every._replace(idle_s=0, daily_at=""), since, 5, now, UTC) == "turn_limit"


# -- daily -------------------------------------------------------------------------


def test_daily_resets_at_the_first_message_after_the_local_time() -> None:
    policy = ResetPolicy(daily_at="04:00", timezone="Europe/Berlin")
    since = ms("2026-06-01T22:00:00+02:00")
    assert decide(policy, since, 1, ms("2026-06-02T03:59:59+02:00"), BERLIN) is None
    assert decide(policy, since, 1, ms("2026-06-02T04:00:00+02:00"), BERLIN) == "daily"
    # Once the thread heard someone after 04:00, not again that day.
    later = ms("2026-06-02T04:05:00+02:00")
    assert decide(policy, later, 1, ms("2026-06-02T23:59:00+02:00"), BERLIN) is None
    assert decide(policy, later, 1, ms("2026-06-03T04:00:00+02:00"), BERLIN) == "daily"


def test_a_daily_reset_after_days_of_silence_is_one_reset() -> None:
    policy = ResetPolicy(daily_at="04:00")
    since = ms("2026-06-01T10:00:00+00:00")
    now = ms("2026-06-09T10:00:00+00:00")
    assert decide(policy, since, 1, now, UTC) == "daily"
    assert last_daily_moment(now, time(4), UTC) == ms("2026-06-09T04:00:00+00:00")


def test_days_of_23_and_25_hours() -> None:
    at = time(4)
    # Berlin springs forward on 2026-03-29 and falls back on 2026-10-25.
    spring = daily_moment(date(2026, 3, 29), at, BERLIN) - daily_moment(
        date(2026, 3, 28), at, BERLIN
    )
    autumn = daily_moment(date(2026, 10, 25), at, BERLIN) - daily_moment(
        date(2026, 10, 24), at, BERLIN
    )
    assert (spring, autumn) == (23 * H, 25 * H)
    assert daily_moment(date(2026, 3, 29), at, BERLIN) == ms("2026-03-29T04:00:00+02:00")
    assert daily_moment(date(2026, 10, 25), at, BERLIN) == ms("2026-10-25T04:00:00+01:00")


def test_a_daily_at_the_clock_skips_falls_at_the_jump() -> None:
    # 2026-03-29 in Berlin: 02:00 CET becomes 03:00 CEST, so 02:30 never shows;
    # the first instant at or after 02:30 local is the jump, 01:00 UTC.
    jump = ms("2026-03-29T01:00:00+00:00")
    assert daily_moment(date(2026, 3, 29), time(2, 30), BERLIN) == jump
    policy = ResetPolicy(daily_at="02:30", timezone="Europe/Berlin")
    since = ms("2026-03-28T23:00:00+01:00")
    assert decide(policy, since, 1, jump - 1, BERLIN) is None
    assert decide(policy, since, 1, jump, BERLIN) == "daily"
    # New York skips 02:00-03:00 on 2026-03-08.
    assert daily_moment(date(2026, 3, 8), time(2, 15), NEW_YORK) == ms("2026-03-08T03:00:00-04:00")
    # Lord Howe skips 02:00-02:30 on 2026-10-04.
    assert daily_moment(date(2026, 10, 4), time(2, 10), LORD_HOWE) == ms(
        "2026-10-04T02:30:00+11:00"
    )


def test_a_daily_at_the_clock_shows_twice_resets_at_the_first_showing_only() -> None:
    # 2026-10-25 in Berlin: 03:00 CEST becomes 02:00 CET, so 02:30 shows twice.
    first = ms("2026-10-25T02:30:00+02:00")
    second = ms("2026-10-25T02:30:00+01:00")
    assert second - first == H
    assert daily_moment(date(2026, 10, 25), time(2, 30), BERLIN) == first
    policy = ResetPolicy(daily_at="02:30", timezone="Europe/Berlin")
    assert decide(policy, first - 1, 1, first, BERLIN) == "daily"
    assert decide(policy, first + 1, 1, second + 1, BERLIN) is None


# -- checks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (ResetPolicy(idle_s=-1), "idle_s"),
        (ResetPolicy(max_turns=-2), "max_turns"),
        (ResetPolicy(daily_at="4:00"), "daily_at"),
        (ResetPolicy(daily_at="24:00"), "daily_at"),
        (ResetPolicy(daily_at="04:60"), "daily_at"),
        (ResetPolicy(daily_at="noon"), "daily_at"),
        (ResetPolicy(daily_at="04:00 "), "daily_at"),
    ],
)
def test_bad_policies_name_their_field(policy: ResetPolicy, field: str) -> None:
    with pytest.raises(ResetPolicyError) as caught:
        check(policy)
    assert caught.value.field == field


def test_good_policies_pass() -> None:
    check(ResetPolicy(idle_s=0.5, daily_at="23:59", max_turns=100))
    assert parse_daily_at("00:00") == time(0, 0)
    assert parse_daily_at("") is None


# -- properties ----------------------------------------------------------------------

ZONES = [UTC, BERLIN, NEW_YORK, LORD_HOWE, ZoneInfo("Pacific/Chatham"), ZoneInfo("Asia/Kolkata")]
START = ms("2026-01-01T00:00:00+00:00")
YEAR = 366 * 24 * H


@settings(max_examples=300, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    now=st.integers(START, START + YEAR),
    hour=st.integers(0, 23),
    minute=st.integers(0, 59),
)
def test_the_latest_moment_is_the_first_instant_showing_the_time(
    zone: ZoneInfo, now: int, hour: int, minute: int
) -> None:
    at = time(hour, minute)
    moment = last_daily_moment(now, at, zone)
    assert now - 26 * H < moment <= now
    local = datetime.fromtimestamp(moment / 1000, UTC).astimezone(zone)
    just_before = datetime.fromtimestamp(moment / 1000 - 1, UTC).astimezone(zone)
    assert local.time() >= at
    assert just_before.time() < at or just_before.date() < local.date()


@settings(max_examples=100, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    gaps=st.lists(st.integers(1, 9 * H), min_size=1, max_size=60),
    hour=st.integers(0, 23),
)
def test_one_daily_reset_per_moment_crossed(zone: ZoneInfo, gaps: list[int], hour: int) -> None:
    """Messages at any spacing: the resets are exactly the days whose moment fell
    between two messages."""
    policy = ResetPolicy(daily_at=f"{hour:02d}:00")
    at = time(hour)
    clock = FakeClock(START)
    since = clock.now
    resets = 0
    for gap in gaps:
        now = clock.advance(gap / 1000)
        if decide(policy, since, 1, now, zone) == "daily":
            resets += 1
        since = now
    first_day = datetime.fromtimestamp(START / 1000, UTC).astimezone(zone).date()
    moments = set()
    day = first_day - timedelta(days=1)
    while (m := daily_moment(day, at, zone)) <= clock.now:
        if m > START:
            moments.add(m)
        day += timedelta(days=1)
    assert resets == len(moments)
