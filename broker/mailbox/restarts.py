"""When the registry starts a failed session actor again (registry.py `_run_actor`).

An actor that failed on its own (a bug, damaged session data) is started again after
a back-off of 0.2 s, doubled at each failure up to 5 s, at most MAX_ACTOR_RESTARTS
times in the daemon's life; then its items wait in the ledger until another item of
the session arrives or the daemon restarts (`health` names them). An actor stopped by
the ledger's storage (a read or write the storage refused: PostgreSQL restarting, an
I/O error; `storage_error`) failed for no fault of its session: it is started again
after the same growing back-off for as long as the storage fails, counting nothing
toward that limit, so no acked item is stranded by an outage; its streak ends when an
actor of the session runs to its end. A session whose actor failed in any way has its
next actor recover it from the ledger first, as some of its items may still be marked
running.
"""

from __future__ import annotations

from ledger.port.errors import StorageFailed, storage_error

MAX_ACTOR_RESTARTS = 5
BACK_OFF_FIRST_S = 0.2
BACK_OFF_MAX_S = 5.0


def stopped_by_storage(exc: BaseException) -> bool:
    """Whether `exc` (or every exception of its group) is the storage's failure."""
    if isinstance(exc, BaseExceptionGroup):
        return all(stopped_by_storage(e) for e in exc.exceptions)
    return isinstance(exc, StorageFailed) or storage_error(exc)


class ActorRestarts:
    """The failures of the actors of each session, and what follows from them."""

    def __init__(self) -> None:
        self._failures: dict[str, int] = {}  # for the daemon's life
        self._outages: dict[str, int] = {}  # the current streak

    def failures_of(self, label: str) -> int:
        return self._failures.get(label, 0)

    def in_outage(self, label: str) -> bool:
        """Whether the session's last actor was stopped by the storage."""
        return label in self._outages

    def failed_before(self, label: str) -> bool:
        """Did an actor of `label` fail? Then the next one recovers the session first."""
        return label in self._failures or label in self._outages

    def failed(self, label: str, exc: BaseException) -> float | None:
        """The back-off before the session's next actor starts; None: no restart."""
        counts = self._outages if stopped_by_storage(exc) else self._failures
        counts[label] = n = counts.get(label, 0) + 1
        if counts is self._failures and n > MAX_ACTOR_RESTARTS:
            return None
        return min(BACK_OFF_MAX_S, BACK_OFF_FIRST_S * 2.0 ** (n - 1))

    def ran(self, label: str) -> None:
        """An actor of the session ran to its end: the storage served it."""
        self._outages.pop(label, None)
