"""Google ADK on the ledger: `LedgerSessionService` (service.py), a drop-in
`BaseSessionService`; what it keeps in the ledger is ledger/api/adk_rows.py."""

from ledger.integrations.adk.service import LedgerSessionService

__all__ = ["LedgerSessionService"]
