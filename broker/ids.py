"""Identifiers and wall-clock time.

`new_id` makes ULIDs (Crockford base32, 48-bit millisecond time + 80 bits).
It is our own because it sits on the ingest hot path: python-ulid takes about
10 µs an id, this 1-1.5 µs on the reference VM. It is also monotonic within a
process: ids made in the same millisecond (or after the clock stepped back)
increment the last one, so id order is creation order. Tests check the output
against python-ulid.

Why a cached prefix: ids made in one millisecond differ only in their last
characters, so the first 18 (the time and the high 40 random bits) are encoded
once and reused while they stay the same; each id then encodes 40 bits, not 130
(measured: 3.1 µs an id before, 1.3 after, timeit in one run on a busy VM).
"""

from __future__ import annotations

import os
import threading
import time

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Two characters (ten bits) per lookup: 13 lookups make the 26 characters.
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]
_SHIFTS = tuple(range(120, -1, -10))
_HIGH_SHIFTS = tuple(range(80, -1, -10))  # the first 18 characters: bits 40 and up
_LOW_40 = (1 << 40) - 1
_RANDOM_MAX = (1 << 80) - 1

_lock = threading.Lock()
_last_ms = 0
_last_random = 0
_prefix_bits = -1  # the bits from 40 up that `_prefix` encodes
_prefix = ""


def encode_ulid(value: int) -> str:
    """The 26-character Crockford base32 form of a 128-bit integer."""
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 1023] for shift in _SHIFTS])


def new_id() -> str:
    global _last_ms, _last_random, _prefix_bits, _prefix
    ms = time.time_ns() // 1_000_000
    pairs = _PAIRS
    with _lock:
        if ms <= _last_ms:
            ms = _last_ms
            _last_random += 1
            if _last_random > _RANDOM_MAX:  # 2**80 ids in one millisecond: borrow the next
                ms, _last_random = ms + 1, 0
        else:
            _last_random = int.from_bytes(os.urandom(10), "big") >> 1  # room to increment
        _last_ms = ms
        bits = _last_random
        high = (ms << 40) | (bits >> 40)
        if high != _prefix_bits:
            _prefix_bits, _prefix = high, "".join([pairs[(high >> s) & 1023] for s in _HIGH_SHIFTS])
        prefix = _prefix
    low = bits & _LOW_40
    return (
        prefix
        + pairs[low >> 30]
        + pairs[(low >> 20) & 1023]
        + pairs[(low >> 10) & 1023]
        + pairs[low & 1023]
    )


def new_entity_id() -> str:
    return f"ent_{new_id()}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000
