"""Timers as pure decisions: what a spec means, and when a timer fires next.

No clock: `now` is passed in, in integer milliseconds since the Unix epoch (UTC),
the ledger's unit for every time.

A spec is valid or refused whole: exactly one of `in_s` (seconds, not negative) or
`at` (an RFC 3339 time with its offset) says the first due time, and `every_s`, if
given, is at least `MIN_EVERY_S` seconds; a refusal names the field it blames. A
timer fires once per due time, and a due time that passed while nobody looked fires
once: a recurring timer that missed five due times fires once, then goes on from the
first due time after `now` on its own grid (`first_at + k * every`), so it never
drifts. The n-th firing of timer T is `timer:T:n` (n from 1: its count of firings
plus one), so a re-run of the same firing has the same name.

`system:<purpose>` labels name sessions with no channel that exist to own timers (a
heartbeat); the purpose is a short name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime

MIN_EVERY_S = 1.0
# Far enough for any real schedule; keeps every time an SQLite integer.
MAX_DELAY_S = 100 * 366 * 86_400
SYSTEM_LABEL = re.compile(r"system:[a-z0-9][a-z0-9_.-]{0,63}")
RFC_3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})", re.IGNORECASE
)


class TimerSpecError(ValueError):
    """A spec refused whole: `field` is the argument it blames."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class TimerSpec:
    text: str
    first_at: int  # ms: the first due time
    every_ms: int | None  # None: fires once


@dataclass(frozen=True, slots=True)
class Firing:
    """One firing decided: its number, the due time it stands for, and
    what the timer becomes (`next_at` None: a one-shot timer is done)."""

    n: int
    due_at: int
    next_at: int | None


def _seconds(field: str, value: object, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TimerSpecError(field, f"{field} must be a number of seconds")
    if not math.isfinite(value) or value < minimum or value > MAX_DELAY_S:
        raise TimerSpecError(field, f"{field} must be {minimum:g}..{MAX_DELAY_S} seconds")
    return float(value)


def parse_at(value: object) -> int:
    """An RFC 3339 time with an offset (`Z` or `+hh:mm`) in ms since the epoch."""
    if not isinstance(value, str) or not 0 < len(value) <= 64:
        raise TimerSpecError("at", "at must be an RFC 3339 time, e.g. 2026-01-31T09:00:00Z")
    # fromisoformat also takes a bare date, or a time with no offset, whose meaning
    # would depend on the host's zone: the pattern first.
    if RFC_3339.fullmatch(value) is None:
        raise TimerSpecError(
            "at", f"at needs a date, a time and an offset (Z or +hh:mm), RFC 3339: {value!r}"
        )
    try:
        when = datetime.fromisoformat(_to_micros(value.upper()))
    except ValueError as exc:
        raise TimerSpecError("at", f"at is not a valid time: {value!r}") from exc
    return round(when.timestamp() * 1000)  # any time in the past fires at once


def _to_micros(value: str) -> str:
    """fromisoformat reads at most six fraction digits; RFC 3339 allows more."""
    head, dot, rest = value.partition(".")
    if not dot:
        return value
    digits = len(rest) - len(rest.lstrip("0123456789"))
    return f"{head}.{rest[: min(digits, 6)]}{rest[digits:]}"


def parse_spec(text: object, in_s: object, at: object, every_s: object, now: int) -> TimerSpec:
    """A spec checked whole. `None` is an absent argument."""
    if not isinstance(text, str) or not text.strip():
        raise TimerSpecError("text", "text must be a non-empty string")
    if (in_s is None) == (at is None):
        raise TimerSpecError("in_s", "give exactly one of in_s or at")
    first_at = parse_at(at) if in_s is None else now + round(_seconds("in_s", in_s, 0.0) * 1000)
    every_ms = None
    if every_s is not None:
        every_ms = round(_seconds("every_s", every_s, MIN_EVERY_S) * 1000)
    return TimerSpec(text, first_at, every_ms)


def next_after(first_at: int, every_ms: int, now: int) -> int:
    """The first due time on the grid `first_at + k * every_ms` (k >= 0) after `now`."""
    if now < first_at:
        return first_at
    return first_at + ((now - first_at) // every_ms + 1) * every_ms


def fire(next_at: int, every_ms: int | None, fired: int, now: int) -> Firing | None:
    """The firing a timer due at `next_at` owes at `now`, or None if not due.

    The missed due times between `next_at` and `now` collapse into this one firing:
    the timer's next due time is the first one after `now` on its grid."""
    if next_at > now:
        return None
    following = None if every_ms is None else next_after(next_at, every_ms, now)
    return Firing(fired + 1, next_at, following)


def msg_id(timer: str, n: int) -> str:
    """The n-th firing's name, `timer:T:n`."""
    return f"timer:{timer}:{n}"


def is_system_label(label: str) -> bool:
    """A `system:<purpose>` label, for a session that exists to own timers."""
    return SYSTEM_LABEL.fullmatch(label) is not None
