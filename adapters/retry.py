"""Retrying a chat server: bounded backoff, then giving up with exit status 75.

Pure: the clock is a parameter. The adapters' connection loops ask
`RetryClock.failed(now)` after each failed attempt and sleep what it says.

The give-up clock starts at the first failure after the last success, and a success
resets it. Once `give_up_s` has passed with no success, the adapter exits 75
(EX_TEMPFAIL): a supervisor (systemd) restarts it later, and nothing is lost because
every position is stored only after the broker's ack.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from adapters.types import Backoff

TEMPFAIL = 75  # sysexits.h EX_TEMPFAIL


class ServerUnavailable(Exception):
    """The chat server stayed down (or kept refusing the login) past `give_up_s`."""


@dataclass
class RetryClock:
    """When to retry and when to give up."""

    give_up_s: float
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=0.5, maximum=30.0))
    attempts: int = 0
    first_failure: float | None = None

    def failed(self, now: float, rand: float) -> float | None:
        """The wait before the next attempt, or None when it is time to give up."""
        if self.first_failure is None:
            self.first_failure = now
        elapsed = now - self.first_failure
        if elapsed >= self.give_up_s:
            return None
        delay = self.backoff.delay(self.attempts, rand)
        self.attempts += 1
        return min(delay, self.give_up_s - elapsed)

    def succeeded(self) -> None:
        self.attempts = 0
        self.first_failure = None


@dataclass
class TokenBucket:
    """A server's send rate: `burst` at once, then `rate` per second (the clock is a parameter)."""

    rate: float
    burst: float
    tokens: float | None = None
    stamp: float = 0.0

    def take(self, now: float) -> float:
        """Take one token; how long to wait before sending (0 when it may go now)."""
        if self.tokens is None:
            self.tokens, self.stamp = self.burst, now
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


@contextlib.contextmanager
def single_error() -> Iterator[None]:
    """Unwrap a task group's group of one, so a connection loop can catch what was raised."""
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) != 1:
            raise
        inner = group.exceptions[0]
        raise inner from inner.__cause__
