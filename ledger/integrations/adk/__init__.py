"""Google ADK on the ledger: `LedgerSessionService` (service.py), a drop-in
`BaseSessionService`, and what it keeps in the ledger (storage.py)."""

from .service import LedgerSessionService

__all__ = ["LedgerSessionService"]
