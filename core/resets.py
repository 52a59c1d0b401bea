"""When a session's thread rolls over: the reset policies as one pure decision.

No I/O and no clock: times are UTC milliseconds passed in, and the timezone is a
`tzinfo` the caller loaded (a `zoneinfo.ZoneInfo` reads its file when made, not here).

Only a person's message asks for the decision, and only a person's message counts as
activity: a timer, worker or system item never refreshes it, so a heartbeat cannot
keep a thread alive. `since` is when the thread last heard a person, or when it began
if that is later (a thread an operator reset at 05:00 is not stale for a 04:00 daily
reset); without it (a thread that never heard anyone) nothing is stale. The reasons
are tried in the order idle, daily, turn_limit, and the first that holds is the
answer; a policy value of 0 (or "") turns its reason off.

`daily_at` is a local wall time. Its moment on a local day is the first instant at
which the local clock shows that time or later: on a day whose clock skips it
(spring forward) the instant of the jump, on a day that shows it twice (fall back)
the first time. A daily reset is due when the latest such moment at or before now
lies after `since`: at most one a day.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Literal, NamedTuple, TypeAlias

Reason: TypeAlias = Literal["idle", "daily", "turn_limit"]
# Why a thread began: the session's first, `/new` or `/reset`, an operator's
# `session.reset`, or one of the automatic rollovers above.
ThreadReason: TypeAlias = Literal["first", "new", "operator", "idle", "daily", "turn_limit"]
AUTOMATIC: frozenset[str] = frozenset({"idle", "daily", "turn_limit"})

_HH_MM = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")


class ResetPolicyError(ValueError):
    """A policy value cannot be used; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class ResetPolicy(NamedTuple):  # a named tuple: it goes to the writer process with messages
    idle_s: float = 0.0  # > 0: a message after this long without one starts a new thread
    daily_at: str = ""  # "HH:MM": the first message after this local time each day does
    timezone: str = "UTC"  # IANA name of the zone `daily_at` is read in
    max_turns: int = 0  # > 0: a thread that reached this many turns rolls over

    @property
    def active(self) -> bool:
        return self.idle_s > 0 or bool(self.daily_at) or self.max_turns > 0


NO_RESETS = ResetPolicy()


def parse_daily_at(value: str) -> time | None:
    """`HH:MM` (24-hour, two digits each) as a time; "" is None (no daily reset)."""
    if value == "":
        return None
    found = _HH_MM.fullmatch(value)
    if found is None:
        raise ResetPolicyError(
            "daily_at", f"daily_at must be HH:MM (00:00 to 23:59), not {value!r}"
        )
    return time(int(found[1]), int(found[2]))


def check(policy: ResetPolicy) -> None:
    """Raise ResetPolicyError for a value no decision could use (the zone's name is
    checked by whoever loads it)."""
    if policy.idle_s < 0:
        raise ResetPolicyError("idle_s", f"idle_s must be 0 (off) or more, not {policy.idle_s}")
    if policy.max_turns < 0:
        raise ResetPolicyError(
            "max_turns", f"max_turns must be 0 (off) or more, not {policy.max_turns}"
        )
    parse_daily_at(policy.daily_at)


def decide(
    policy: ResetPolicy, since: int | None, thread_turns: int, now: int, tz: tzinfo
) -> Reason | None:
    """Does the person's message arriving at `now` start a new thread first, and why?"""
    if since is not None:
        if policy.idle_s > 0 and now - since >= policy.idle_s * 1000:
            return "idle"
        at = parse_daily_at(policy.daily_at)
        if at is not None and since < last_daily_moment(now, at, tz) <= now:
            return "daily"
    if policy.max_turns > 0 and thread_turns >= policy.max_turns:
        return "turn_limit"
    return None


def last_daily_moment(now: int, at: time, tz: tzinfo) -> int:
    """The latest moment of `at` (see `daily_moment`) at or before `now`, in UTC ms."""
    today = datetime.fromtimestamp(now / 1000, UTC).astimezone(tz).date()
    moment = daily_moment(today, at, tz)
    if moment > now:
        moment = daily_moment(today - timedelta(days=1), at, tz)
    return moment


def daily_moment(day: date, at: time, tz: tzinfo) -> int:
    """The moment of `at` on the local `day` (skipped: the jump; twice: the first), in UTC ms."""
    wall = datetime.combine(day, at)
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if _local(first, tz) == wall:
        return _ms(first)  # the time exists; fold 0 is its first showing
    # The clock jumps over `wall`: fold 1 reads it with the offset after the jump
    # (an instant before it), fold 0 with the one before (an instant after it).
    lo = int(wall.replace(tzinfo=tz, fold=1).astimezone(UTC).timestamp())
    hi = int(first.timestamp())
    while hi - lo > 1:  # the first second whose local time is `wall` or later
        mid = (lo + hi) // 2
        if _local(datetime.fromtimestamp(mid, UTC), tz) >= wall:
            hi = mid
        else:
            lo = mid
    return hi * 1000


def _local(moment: datetime, tz: tzinfo) -> datetime:
    return moment.astimezone(tz).replace(tzinfo=None, fold=0)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp()) * 1000 + moment.microsecond // 1000
