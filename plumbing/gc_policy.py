"""Garbage-collector settings for the daemon and its ledger writer process.

Each message the broker handles allocates dozens of short-lived containers, and what
a session keeps waiting (queue items, backlogs) survives into the older generations,
which CPython's default thresholds scan again and again: a large share of the ack
rate and most of the tail latency of acks (docs/performance.md).

What exists when `tune` is called (modules, schemas, compiled validators) is frozen,
so no collection scans it again. A young collection runs every YOUNG_THRESHOLD
allocations instead of 700: reference counting frees nearly everything the broker
makes, and the collector, only for cycles, still finds them, just later, at the
price of a few MiB of young objects between collections.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
MIDDLE_THRESHOLD = 20  # young collections per middle-generation collection


def tune() -> None:
    """Freeze what exists and raise the young threshold, in this process; call it once
    start-up imports are done."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, gc.get_threshold()[2])
