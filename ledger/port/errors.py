"""Errors the ledger raises for callers to map onto protocol error codes."""

from __future__ import annotations

import sqlite3

from ledger.port.cipher import Error as DriverError


class LedgerLookupError(Exception):
    code = "internal"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFound(LedgerLookupError):
    code = "not_found"


class Conflict(LedgerLookupError):
    code = "invalid"


class HeadMoved(Exception):
    """The session's head is no longer the turn's parent."""


class LedgerWriteFailed(Exception):
    """The transaction holding the job did not commit; nothing of it was kept."""


class LeaseFenced(LedgerWriteFailed):
    """A running turn's write carried a lease token that no longer holds its session's
    lease (ledger/port/fencing.py): another attempt took the lease, so the write changed
    nothing and its attempt is cut off."""


class WriterOverloaded(Exception):
    """The writer's queue stayed full; the caller should shed load."""


class WriterClosed(Exception):
    """The writer has stopped and takes no more jobs."""


class LedgerError(Exception):
    """The ledger cannot be used (schema too new, file unreadable, ...)."""


class LedgerDamaged(LedgerError):
    """SQLite cannot read all of the ledger file; the message says how to recover."""


class LedgerUnreachable(LedgerError):
    """The database server holding the ledger (ledger/postgres) cannot be reached."""


class NotALedger(LedgerError):
    """The file exists but is not an agent-broker ledger (another program's database,
    or not a database at all): refused untouched (ledger/foreign.py)."""


class LedgerNotWritable(LedgerError):
    """The ledger file cannot be written (owner, mode or an immutable attribute)."""


class Invalid(LedgerLookupError):
    code = "invalid"


class NotReachable(LedgerLookupError):
    """A broker tool's call named a session or turn its turn may not reach, or one that
    does not exist: one sentence for both (core/reach.py); refused, audited."""

    code = "forbidden"


class StorageFailed(LedgerWriteFailed):
    """The storage refused the transaction (disk full, I/O error); the same jobs may
    commit later. Within the writer only: callers see it only at a shutdown
    (ledger/writer/group_commit.py)."""


class HeldBack(StorageFailed):
    """Not run: an earlier batch failed on the storage and goes first (group_commit.py)."""


# The storage, not the data: these may pass by themselves, so a batch is run again.
STORAGE_ERRORS = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
    }
)


def storage_error(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, DriverError) and code is not None and code & 0xFF in STORAGE_ERRORS


class WriterDied(LedgerWriteFailed):
    """The process running the transactions is gone; no more writes can happen."""


class WriterStuck(WriterDied):
    """The storage failed for longer than the writer may wait (ledger/writer/group_commit.py)."""
