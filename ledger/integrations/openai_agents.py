"""`LedgerSession`: the OpenAI Agents SDK's `Session`, kept in an agent-broker ledger.

    from ledger.integrations.openai_agents import LedgerSession
    session = LedgerSession("user-42", path="sessions.db")   # was SQLiteSession(...)
    await Runner.run(agent, "hi", session=session)

Rule 1: one `add_items` call is one turn of the ledger: committed whole before
        it returns, never interleaved with another writer's items, and nothing
        of it stored when an item is not JSON-serializable (TypeError naming
        the item). Items come back equal to what went in, whatever their type.
Rule 2: every LedgerSession (and Store) of one file in a process shares one
        writer thread (ledger/api/engine.py), so many sessions commit together;
        `close()` lets go of it, the last one closes the file.
Rule 3: `pop_item` and `clear_session` move the session's head; the turns they
        take off the thread stay in the ledger (ledger/api/writes.py Rule 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.memory.session import SessionABC
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from ..api.engine import acquire
from ..api.store import Store
from ..db import Synchronous
from ..errors import NotFound
from ..ids import now_ms


class LedgerSession(SessionABC):
    """A Session of the OpenAI Agents SDK on an agent-broker ledger file (`path`)."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        *,
        path: str | Path,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        # Opening is blocking, as the SDK's own SQLiteSession's is (Rule 2).
        self._store = Store(acquire(Path(path), synchronous), now_ms)

    @property
    def store(self) -> Store:
        """The Store underneath, for what the Session protocol has no word for (fork,
        compact, export)."""
        return self._store

    async def get_items(self, limit: int | None = None) -> list[Any]:
        wanted = resolve_session_limit(limit, self.session_settings)
        try:
            if wanted is None:
                return await self._store.items(self.session_id)
            return await self._store.last(self.session_id, wanted)
        except NotFound:
            return []

    async def add_items(self, items: list[Any]) -> None:
        if not items:
            self._store.path  # noqa: B018 - a closed session refuses even nothing
            return
        await self._store.append(self.session_id, items)

    async def pop_item(self) -> Any:
        try:
            return await self._store.pop(self.session_id)
        except NotFound:
            return None

    async def clear_session(self) -> None:
        try:
            await self._store.clear(self.session_id)
        except NotFound:
            return

    def close(self) -> None:
        """Let go of the ledger file (Rule 2); the session cannot be used after."""
        self._store._close()
