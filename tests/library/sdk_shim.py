"""A pytest plugin that runs the OpenAI Agents SDK's own session tests against
`LedgerSession`: it puts a stand-in for `SQLiteSession` in the SDK's namespaces
before their test modules are imported. None of their code is here; see
docs/integrations.md for the command and what passes.

The stand-in takes `SQLiteSession`'s arguments: its `db_path` becomes the ledger
file (`:memory:`, a private database per instance there, becomes a fresh file of
its own), and the table names, which a ledger does not have, are ignored.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import agents
import agents.memory
import pytest

from ledger.integrations.openai_agents import LedgerSession

_scratch = Path(tempfile.mkdtemp(prefix="ledger-sdk-"))


class LedgerBackedSQLiteSession(LedgerSession):
    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        if str(db_path) == ":memory:":
            db_path = Path(tempfile.mkstemp(suffix=".db", dir=_scratch)[1])
        super().__init__(session_id, path=db_path, session_settings=session_settings)


def pytest_configure(config: pytest.Config) -> None:
    agents.SQLiteSession = LedgerBackedSQLiteSession  # type: ignore[misc,assignment]
    agents.memory.SQLiteSession = LedgerBackedSQLiteSession  # type: ignore[misc,assignment]
