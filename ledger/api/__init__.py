"""The ledger as a library: a durable, serial session store for agent frameworks,
in this process (`Store`, `SyncStore`) or through a running daemon
(`Store.connect`). See docs/integrations.md."""

from __future__ import annotations

from ..db import LedgerDamaged, LedgerError, LedgerNotWritable
from ..errors import Conflict, NotFound
from .errors import DaemonUnreachable, LedgerInUse, NotALedger, SchemaTooNew, StoreClosed
from .records import Page, SessionInfo, TurnInfo
from .store import Store
from .sync import SyncStore

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
    "SessionInfo",
    "Store",
    "StoreClosed",
    "SyncStore",
    "TurnInfo",
]
