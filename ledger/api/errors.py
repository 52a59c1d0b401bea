"""What the library face raises when a ledger cannot be opened as asked.

Every one is a `LedgerError` (ledger/db.py), so code that already catches the
daemon's ledger errors catches these; each message names the file and what to do.
A lookup that misses raises the ledger's own `NotFound` or `Conflict`
(ledger/port/errors.py), with the argument it blames in `field`.
"""

from __future__ import annotations

from ledger.port.errors import LedgerError
from ledger.port.errors import NotALedger as NotALedger  # its home is the port's errors


class SchemaTooNew(LedgerError):
    """The ledger was written by a newer agent-broker than this one."""


class LedgerInUse(LedgerError):
    """Another process owns the ledger's writes: a running daemon (its socket is
    named) or another program's Store."""

    def __init__(self, message: str, *, socket: str | None = None, pid: int | None = None) -> None:
        super().__init__(message)
        self.socket = socket
        self.pid = pid


class StoreClosed(LedgerError, RuntimeError):
    """The Store was closed; open it again to go on."""


class DaemonUnreachable(LedgerError, ConnectionError):
    """`Store.connect` found no daemon on the socket it was given (no such file,
    not a socket, nobody listening); an OSError still, as it was before."""
