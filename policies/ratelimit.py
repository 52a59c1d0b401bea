"""Token buckets for per-sender rate limits. Pure: the clock is passed in.

A bucket holds at most `burst` tokens and gains `per_minute / 60` tokens a second; a
message takes one token or is refused. Buckets are keyed by (rule, channel, sender),
and a bucket that has refilled completely carries no information and may be
forgotten, which keeps memory bounded by the senders active within one refill period.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Rate:
    per_minute: float
    burst: int

    @property
    def per_second(self) -> float:
        return self.per_minute / 60.0


class RateLimiter:
    def __init__(self, max_keys: int = 100_000) -> None:
        self._buckets: dict[tuple[str, str, str], tuple[float, float]] = {}  # tokens, at
        self._max_keys = max_keys

    def allow(self, key: tuple[str, str, str], rate: Rate, now: float) -> bool:
        tokens, at = self._buckets.get(key, (float(rate.burst), now))
        tokens = min(float(rate.burst), tokens + (now - at) * rate.per_second)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return False
        self._buckets[key] = (tokens - 1.0, now)
        if len(self._buckets) > self._max_keys:
            self._forget_full(rate, now)
        return True

    def _forget_full(self, rate: Rate, now: float) -> None:
        full_after = rate.burst / rate.per_second if rate.per_second > 0 else float("inf")
        stale = [k for k, (_, at) in self._buckets.items() if now - at >= full_after]
        for key in stale:
            del self._buckets[key]
        if len(self._buckets) > self._max_keys:  # still too many: forget the oldest half
            by_age = sorted(self._buckets, key=lambda k: self._buckets[k][1])
            for key in by_age[: len(by_age) // 2]:
                del self._buckets[key]

    def clear(self) -> None:
        self._buckets.clear()
