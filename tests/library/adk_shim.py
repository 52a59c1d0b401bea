"""A pytest plugin that runs Google ADK's own session-service tests against
`LedgerSessionService`: before their test modules are imported, it puts ledger
-backed stand-ins for ADK's `InMemorySessionService`, `DatabaseSessionService` and
`SqliteSessionService` in ADK's namespaces, so every backend their tests build is
ours. None of their code is here; see docs/integrations.md for the command and
what passes.

A stand-in takes its original's arguments: a database URL or path naming a file
becomes the ledger file, and `:memory:` (or no argument), a private database per
instance there, becomes a fresh file of its own.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import google.adk.sessions as adk_sessions
import google.adk.sessions.in_memory_session_service as in_memory_module
import google.adk.sessions.sqlite_session_service as sqlite_module
import pytest

from ledger.integrations.adk import LedgerSessionService

_scratch = Path(tempfile.mkdtemp(prefix="ledger-adk-"))


def _ledger_file(where: str) -> Path:
    path = where.split("///", 1)[-1].split("?", 1)[0] if "://" in where else where
    if path in ("", ":memory:"):
        return Path(tempfile.mkstemp(suffix=".db", dir=_scratch)[1])
    return Path(path)


class LedgerBackedInMemorySessionService(LedgerSessionService):
    def __init__(self) -> None:
        super().__init__(path=_ledger_file(":memory:"))


class LedgerBackedDatabaseSessionService(LedgerSessionService):
    def __init__(self, db_url: str, **kwargs: Any) -> None:
        super().__init__(path=_ledger_file(db_url))

    async def close(self) -> None:  # type: ignore[override]
        # ADK's DatabaseSessionService closes asynchronously.
        super().close()


class LedgerBackedSqliteSessionService(LedgerSessionService):
    def __init__(self, db_path: str) -> None:
        super().__init__(path=_ledger_file(db_path))


def pytest_configure(config: pytest.Config) -> None:
    stand_ins = {
        "InMemorySessionService": LedgerBackedInMemorySessionService,
        "DatabaseSessionService": LedgerBackedDatabaseSessionService,
        "SqliteSessionService": LedgerBackedSqliteSessionService,
    }
    for name, cls in stand_ins.items():
        setattr(adk_sessions, name, cls)
    in_memory_module.InMemorySessionService = LedgerBackedInMemorySessionService  # type: ignore[misc,assignment]
    sqlite_module.SqliteSessionService = LedgerBackedSqliteSessionService  # type: ignore[misc,assignment]
    try:
        import google.adk.sessions.database_session_service as database_module
    except ImportError:  # SQLAlchemy is not installed: ADK's own class cannot load either
        return
    database_module.DatabaseSessionService = LedgerBackedDatabaseSessionService  # type: ignore[misc,assignment]
