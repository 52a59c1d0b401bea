"""The ledger port: what the broker shell asks of a ledger, and the records and
errors that cross it. The shell imports only this package; `ledger.sqlite` and
`ledger.postgres` implement it and pass `tests/conformance/` alike."""

from ledger.port.committing import Admits, Committing
from ledger.port.errors import (
    Conflict,
    HeadMoved,
    Invalid,
    LedgerDamaged,
    LedgerError,
    LedgerLookupError,
    LedgerNotWritable,
    LedgerUnreachable,
    LedgerWriteFailed,
    NotFound,
    StorageFailed,
    WriterClosed,
    WriterDied,
    WriterOverloaded,
    WriterStuck,
)
from ledger.port.features import RoutePort, SnapshotPort, ThreadPort, TimerPort, TitlePort
from ledger.port.protocols import (
    DeliveryPort,
    IngestPort,
    LedgerPort,
    OpsPort,
    OutboxRow,
    ReadPort,
    SessionStart,
    TurnPort,
    WriterStats,
)

__all__ = [
    "Admits",
    "Committing",
    "Conflict",
    "DeliveryPort",
    "HeadMoved",
    "IngestPort",
    "Invalid",
    "LedgerDamaged",
    "LedgerError",
    "LedgerLookupError",
    "LedgerNotWritable",
    "LedgerPort",
    "LedgerUnreachable",
    "LedgerWriteFailed",
    "NotFound",
    "OpsPort",
    "OutboxRow",
    "ReadPort",
    "RoutePort",
    "SessionStart",
    "SnapshotPort",
    "StorageFailed",
    "ThreadPort",
    "TimerPort",
    "TitlePort",
    "TurnPort",
    "WriterClosed",
    "WriterDied",
    "WriterOverloaded",
    "WriterStats",
    "WriterStuck",
]
