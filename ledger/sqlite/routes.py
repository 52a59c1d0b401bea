"""The route-binding methods of the SQLite ledger (`ledger/port/protocols.py` RoutePort), beside
`ledger/sqlite/store.py` so that the `Ledger` class stays small: each runs one job of
`ledger/binding_jobs.py` on the writer, or one read of `ledger/bindings.py`.
"""

from __future__ import annotations

from typing import Any, TypeVar

from core.bindings import Conversation
from ledger import binding_jobs, bindings
from ledger.port.records import BindCommand
from ledger.sqlite.reads import ReaderPool
from ledger.writer.group_commit import LedgerWriter
from ledger.writer.jobs import Pending

T = TypeVar("T")


class RouteMethods:
    writer: LedgerWriter

    readers: ReaderPool  # SqliteReads', beside this class in `Ledger`'s bases

    async def route_bind(self, conversation: Conversation, session: str, now: int) -> str:
        return await self.writer.call(binding_jobs.route_bind, conversation, session, now)

    async def route_unbind(self, conversation: Conversation) -> str:
        return await self.writer.call(binding_jobs.route_unbind, conversation)

    async def route_list(self, session: str | None) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: bindings.bindings_of(c, session))

    def submit_chat_bind(self, cmd: BindCommand, now: int) -> Pending[str]:
        return self.writer.submit(binding_jobs.chat_bind, cmd, now)
