"""Google ADK's session services in bench/peers.py: ADK's `SqliteSessionService`
and `DatabaseSessionService` (SQLAlchemy over aiosqlite), and our
`LedgerSessionService`, on the same workload as every other row.

A turn's two items are two events, appended one after the other as ADK's Runner
appends the user's event and then the agent's; the read is `get_session` with
`GetSessionConfig(num_recent_events=30)`. A session is created by its first
append (its `create_session` counts in that turn's time, as a first `append`
creates a session in the Store). Every store runs in WAL at the bench's
`synchronous`: ADK's two open connections of their own, so the setting is put on
each connection they open.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

APP, USER = "bench", "user"


class ADKPeer:
    def __init__(self, service: Any, closer: Any = None) -> None:
        from google.adk.events.event import Event
        from google.adk.sessions.base_session_service import GetSessionConfig
        from google.genai import types

        self.service, self.closer = service, closer
        self.event, self.types = Event, types
        self.recent = GetSessionConfig(num_recent_events=30)
        self.sessions: dict[str, Any] = {}

    async def append(self, sid: str, items: list[dict[str, Any]]) -> None:
        session = self.sessions.get(sid)
        if session is None:
            session = await self.service.create_session(app_name=APP, user_id=USER, session_id=sid)
            self.sessions[sid] = session
        for item in items:
            role = "user" if item["role"] == "user" else "model"
            part = self.types.Part(text=item["content"])
            event = self.event(
                invocation_id=f"{sid}-{len(session.events) // 2}",
                author="user" if role == "user" else "assistant",
                content=self.types.Content(role=role, parts=[part]),
            )
            await self.service.append_event(session, event)

    async def last30(self, sid: str) -> list[Any]:
        got = await self.service.get_session(
            app_name=APP, user_id=USER, session_id=sid, config=self.recent
        )
        return list(got.events)

    async def close(self) -> None:
        if self.closer is not None:
            result = self.closer()
            if result is not None:
                await result


def _wal(path: Path) -> None:
    # journal_mode is kept in the file: set once, every later connection has it.
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = WAL")


async def open_adk_sqlite(path: Path, sync: str) -> ADKPeer:
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    class Same(SqliteSessionService):
        @asynccontextmanager
        async def _get_db_connection(self) -> AsyncIterator[Any]:
            async with super()._get_db_connection() as db:
                await db.execute(f"PRAGMA synchronous = {sync}")
                yield db

    _wal(path)
    return ADKPeer(Same(str(path)))


async def open_adk_database(path: Path, sync: str) -> ADKPeer:
    from google.adk.sessions.database_session_service import DatabaseSessionService
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{path}")

    def same(dbapi_conn: Any, _: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute(f"PRAGMA synchronous = {sync}")
        cursor.close()

    event.listen(engine.sync_engine, "connect", same)
    service = DatabaseSessionService(db_engine=engine)

    async def close() -> None:
        await service.close()
        await engine.dispose()

    return ADKPeer(service, close)


async def open_ledger_service(path: Path, sync: str) -> ADKPeer:
    from ledger.integrations.adk import LedgerSessionService

    service = LedgerSessionService(path=path, synchronous="FULL" if sync == "FULL" else "NORMAL")
    return ADKPeer(service, service.close)
