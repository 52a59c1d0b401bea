"""`brokerctl top`'s figures: a histogram's quantile as Prometheus computes it, and rates."""

from __future__ import annotations

import math

from brokerctl.top import Scrape, parse_metrics, quantile, rates


def test_quantile_interpolates_within_its_bucket() -> None:
    buckets = {0.01: 50.0, 0.1: 90.0, 1.0: 100.0, math.inf: 100.0}
    assert quantile(0.5, buckets) == 0.01
    assert abs((quantile(0.99, buckets) or 0) - 0.91) < 1e-9
    assert quantile(0.99, {0.1: 0.0, math.inf: 0.0}) is None
    assert quantile(0.99, {0.1: 1.0, math.inf: 10.0}) == 0.1  # past the last bound


def test_rates_between_two_scrapes() -> None:
    before = Scrape(10.0, turns=5, ack_buckets={0.01: 4.0, math.inf: 4.0})
    now = Scrape(12.0, turns=9, ack_buckets={0.01: 4.0, 0.1: 8.0, math.inf: 8.0})
    turns, p99 = rates(before, now)
    assert turns == 2.0
    assert p99 is not None and 0.01 < p99 <= 0.1
    assert rates(None, now)[0] is None


def test_parse_metrics_sums_the_outcomes() -> None:
    text = (
        "# TYPE broker_turns counter\n"
        'broker_turns_total{outcome="completed"} 3.0\n'
        'broker_turns_total{outcome="failed"} 1.0\n'
        "# TYPE broker_ack_seconds histogram\n"
        'broker_ack_seconds_bucket{le="0.01"} 2.0\n'
        'broker_ack_seconds_bucket{le="+Inf"} 4.0\n'
        "broker_ack_seconds_count 4.0\n"
        "broker_ack_seconds_sum 0.1\n"
    )
    scrape = parse_metrics(text, 1.0)
    assert scrape.turns == 4.0 and scrape.ack_buckets == {0.01: 2.0, math.inf: 4.0}
