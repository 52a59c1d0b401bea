from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from policies.ratelimit import Rate, RateLimiter

KEY = ("rule", "chan", "sender")


def test_burst_then_refill() -> None:
    limiter, rate = RateLimiter(), Rate(per_minute=60, burst=3)
    assert [limiter.allow(KEY, rate, 0.0) for _ in range(4)] == [True, True, True, False]
    assert limiter.allow(KEY, rate, 0.5) is False  # half a token so far
    assert limiter.allow(KEY, rate, 1.0) is True  # one token a second
    assert limiter.allow(KEY, rate, 1.0) is False


def test_keys_are_independent() -> None:
    limiter, rate = RateLimiter(), Rate(per_minute=1, burst=1)
    assert limiter.allow(KEY, rate, 0.0)
    assert not limiter.allow(KEY, rate, 0.0)
    assert limiter.allow(("rule", "chan", "other"), rate, 0.0)


def test_memory_stays_bounded() -> None:
    limiter, rate = RateLimiter(max_keys=100), Rate(per_minute=600, burst=1)
    for n in range(1000):
        assert limiter.allow(("r", "c", str(n)), rate, n * 0.001)
    assert len(limiter._buckets) <= 101


@given(st.lists(st.floats(min_value=0, max_value=0.5), min_size=1, max_size=200))
def test_never_more_than_burst_plus_refill(gaps: list[float]) -> None:
    limiter, rate = RateLimiter(), Rate(per_minute=120, burst=5)
    now, allowed = 0.0, 0
    for gap in gaps:
        now += gap
        allowed += limiter.allow(KEY, rate, now)
    assert allowed <= rate.burst + now * rate.per_second + 1e-9
