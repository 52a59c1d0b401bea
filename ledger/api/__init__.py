"""The ledger as a library: a durable, serial session store for agent frameworks,
in this process (`Store`, `SyncStore`) or through a running daemon
(`Store.connect`). See docs/integrations.md."""

from __future__ import annotations

from ledger.api.errors import (
    DaemonUnreachable,
    LedgerInUse,
    NotALedger,
    SchemaTooNew,
    SessionEnded,
    StoreClosed,
)
from ledger.api.records import Page, SessionInfo, TurnInfo
from ledger.api.store import Store
from ledger.api.sync import SyncStore
from ledger.port.errors import Conflict, LedgerDamaged, LedgerError, LedgerNotWritable, NotFound

__all__ = [
    "Conflict",
    "DaemonUnreachable",
    "LedgerDamaged",
    "LedgerError",
    "LedgerInUse",
    "LedgerNotWritable",
    "NotALedger",
    "NotFound",
    "Page",
    "SchemaTooNew",
    "SessionEnded",
    "SessionInfo",
    "Store",
    "StoreClosed",
    "SyncStore",
    "TurnInfo",
]
