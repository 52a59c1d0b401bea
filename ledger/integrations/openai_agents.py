"""`LedgerSession`: the OpenAI Agents SDK's `Session`, kept in an agent-broker ledger.

    from ledger.integrations.openai_agents import LedgerSession
    session = LedgerSession("user-42", path="sessions.db")   # was SQLiteSession(...)
    await Runner.run(agent, "hi", session=session)
    session = LedgerSession("user-42", socket="/run/agent-broker/broker.sock")  # via a daemon

One `add_items` call is one turn of the ledger: committed whole before it returns,
never interleaved with another writer's items, and nothing of it stored when an item
is not JSON-serializable (TypeError naming the item). Items come back equal to what
went in, whatever their type; `get_items(limit)` answers as `SQLiteSession` does (0
reads nothing, a negative limit reads every item). `pop_item` and `clear_session`
move the session's head; the turns they take off the thread stay in the ledger.

Every LedgerSession (and Store) of one file in a process shares one writer thread
(ledger/api/engine.py), so many sessions commit together; `close()` lets go of it,
and the last one closes the file. With `socket=`, the calls go to the running daemon
(ledger/api/remote.py) on a connection made at the first call of each event loop: a
session object outlives the `asyncio.run` it was made in, a connection does not.
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

from ledger.api.engine import acquire
from ledger.api.errors import StoreClosed
from ledger.api.remote import RemoteStore
from ledger.api.store import Store
from ledger.api.waiting import current_loop
from ledger.db import Synchronous
from ledger.port.errors import NotFound
from plumbing.ids import now_ms


class LedgerSession(SessionABC):
    """A Session of the OpenAI Agents SDK on an agent-broker ledger file (`path`)."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        *,
        path: str | Path | None = None,
        socket: str | Path | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        if (path is None) == (socket is None):
            raise ValueError(
                "give LedgerSession either path= (a ledger file) or socket= (a daemon)"
            )
        self._socket = None if socket is None else str(socket)
        self._remote: RemoteStore | None = None
        self._remote_loop: object = None
        # Opening is blocking, as the SDK's own SQLiteSession's is.
        self._local = None if path is None else Store(acquire(Path(path), synchronous), now_ms)

    @property
    def store(self) -> Store:
        """The Store underneath, for what the Session protocol has no word for (fork,
        compact, export), as ADK's `service.store`; with `socket=`, `await
        session.remote()` is its counterpart."""
        if self._local is None:
            if self._socket is None:
                raise StoreClosed("the LedgerSession is closed")
            raise StoreClosed("this session reaches a daemon: use `await session.remote()`")
        self._local.path  # noqa: B018 - raises StoreClosed once closed
        return self._local

    async def remote(self) -> RemoteStore:
        """The daemon's Store calls, on a connection of this event loop."""
        if self._socket is None:
            raise StoreClosed("the LedgerSession is closed, or has no daemon")
        loop = current_loop()
        if self._remote is None or self._remote_loop is not loop:
            self._remote, self._remote_loop = await RemoteStore.connect(self._socket), loop
        return self._remote

    async def _store(self) -> Store | RemoteStore:
        return (
            self.store if self._local is not None or self._socket is None else await self.remote()
        )

    async def get_items(self, limit: int | None = None) -> list[Any]:
        wanted = resolve_session_limit(limit, self.session_settings)
        store = await self._store()
        try:
            if wanted is None or wanted < 0:  # as SQLiteSession's LIMIT
                return await store.items(self.session_id)
            return await store.last(self.session_id, wanted)
        except NotFound:
            return []

    async def add_items(self, items: list[Any]) -> None:
        if not items:
            await self._store()  # a closed session refuses even nothing
            return
        await (await self._store()).append(self.session_id, items)

    async def pop_item(self) -> Any:
        try:
            return await (await self._store()).pop(self.session_id)
        except NotFound:
            return None

    async def clear_session(self) -> None:
        try:
            await (await self._store()).clear(self.session_id)
        except NotFound:
            return

    def close(self) -> None:
        """Let go of the ledger file or the daemon's connection; the session
        cannot be used after."""
        if self._local is not None:
            self._local._close()
        if self._remote is not None:
            self._remote.close_now()
        self._socket = None
