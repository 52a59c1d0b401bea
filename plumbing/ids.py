"""Identifiers and wall-clock time: the one id generator of the process.

`new_id` makes ULIDs with `core.ids.UlidSequence`, reading the clock and
`os.urandom` here. It is our own because it sits on the ingest hot path, where
python-ulid costs several times more (docs/performance.md); tests check the output
against python-ulid.

The ledger makes ids inside its transactions, and the broker and the adapters take
theirs from here too, so the ids of one process come from one sequence and sort in
creation order.
"""

from __future__ import annotations

import os
import threading
import time

from core.ids import UlidSequence

_lock = threading.Lock()
_sequence = UlidSequence()


def _fresh_random() -> int:
    return int.from_bytes(os.urandom(10), "big") >> 1  # room to increment


def new_id() -> str:
    ms = time.time_ns() // 1_000_000
    with _lock:
        return _sequence.next(ms, _fresh_random)


def new_entity_id() -> str:
    return f"ent_{new_id()}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000
