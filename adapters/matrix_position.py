"""Which /sync token may be stored: the latest one the broker acked whole.

Pure: no I/O. The Matrix adapter opens a batch per sync, counts each message
it passes to the broker into it, closes it with the sync's `next_batch`, and
calls `acked()` after each broker ack (acks come in the order the messages
were sent, as the bridge sends them one at a time).

A token is safe to store once every message of its sync and of every sync before it
was acked. Under a steady stream the stored token still moves forward sync by sync;
it never waits for a quiet moment.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass
class _Batch:
    waiting: int = 0  # messages of this sync sent and not yet acked
    token: str | None = None  # set once every message of the sync was sent


class AckedTokens:
    def __init__(self) -> None:
        self._batches: deque[_Batch] = deque()

    def open(self) -> None:
        """A sync's messages start going to the broker."""
        self._batches.append(_Batch())

    def sent(self) -> None:
        """One more message of the open sync went to the broker."""
        self._batches[-1].waiting += 1

    def close(self, token: str) -> str | None:
        """The open sync's messages were all sent; the token now safe to store, if any."""
        self._batches[-1].token = token
        return self._settled()

    def acked(self) -> str | None:
        """The oldest message waiting was acked; the token now safe to store, if any."""
        for batch in self._batches:
            if batch.waiting:
                batch.waiting -= 1
                break
        return self._settled()

    def _settled(self) -> str | None:
        safe = None
        while self._batches and not self._batches[0].waiting and self._batches[0].token:
            safe = self._batches.popleft().token
        return safe
