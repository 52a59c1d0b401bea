"""Garbage-collector settings for the daemon and its ledger writer process.

Why: CPython runs a young collection every 700 net allocations by default.
Each message the broker handles allocates dozens of short-lived containers,
and what a session keeps waiting (queue items, backlogs) survives into the
older generations, which grow and are scanned again and again. Measured with
`bench.ingest` on the 2-core reference machine, the default cost about a
quarter of the closed-loop ack rate, and its full collections (70-150 ms with
tens of thousands of messages waiting) made most of the p99 ack latency.

Rule 1: what exists when `tune` is called (modules, schemas, compiled
        validators) is frozen: no collection scans it again.
Rule 2: a young collection runs every YOUNG_THRESHOLD allocations instead of
        700. Reference counting frees nearly everything the broker makes; the
        collector is only for cycles, which it still finds, just later, at the
        price of a few MiB of young objects between collections.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
MIDDLE_THRESHOLD = 20  # young collections per middle-generation collection


def tune() -> None:
    """Apply Rules 1 and 2 to this process; call it once start-up imports are done."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, gc.get_threshold()[2])
