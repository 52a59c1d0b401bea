"""ULIDs from a clock reading and randomness that the caller passes in.

A ULID is 26 Crockford base32 characters: 48 bits of milliseconds, then 80
random bits. The shell that reads the clock and the system's randomness is
`plumbing/ids.py`; this module only encodes and keeps the order.

Ids from one `UlidSequence` strictly increase, so id order is creation order: an
id made in the same millisecond as the last (or after the clock stepped back)
increments the last one's random part, and 2**80 ids in one millisecond borrow the
next. `fresh_random` is called only when the millisecond moves on; it should return
fewer than 80 bits (the shell's 79) to leave room to increment.
"""

from __future__ import annotations

from collections.abc import Callable

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Two characters (ten bits) per lookup: 13 lookups make the 26 characters.
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]
_SHIFTS = tuple(range(120, -1, -10))  # each pair's place in the 128 bits, highest first
_RANDOM_MAX = (1 << 80) - 1


class UlidSequence:
    """Monotonic ULIDs (see the module rules). Not thread-safe: the shell locks."""

    __slots__ = ("_last_ms", "_last_random")

    def __init__(self, last_ms: int = 0, last_random: int = 0) -> None:
        self._last_ms = last_ms
        self._last_random = last_random

    def next(self, now_ms: int, fresh_random: Callable[[], int]) -> str:
        ms = now_ms
        if ms <= self._last_ms:
            ms = self._last_ms
            self._last_random += 1
            if self._last_random > _RANDOM_MAX:  # 2**80 ids in one millisecond: borrow the next
                ms, self._last_random = ms + 1, 0
        else:
            self._last_random = fresh_random()
        self._last_ms = ms
        bits = (ms << 80) | self._last_random
        return "".join([_PAIRS[(bits >> s) & 1023] for s in _SHIFTS])
