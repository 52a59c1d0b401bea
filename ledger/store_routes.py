"""The route-binding methods of the SQLite ledger (`ledger/port.py` RoutePort), beside
`ledger/store.py` so that the `Ledger` class stays small: each runs one job of
`ledger/binding_jobs.py` on the writer, or one read of `ledger/bindings.py`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from broker.core.bindings import Conversation

from . import binding_jobs, bindings
from .jobs import Pending
from .writer import LedgerWriter

T = TypeVar("T")


class RouteMethods:
    writer: LedgerWriter

    if TYPE_CHECKING:  # SqliteReads.read, beside this class in `Ledger`'s bases

        async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def route_bind(self, conversation: Conversation, session: str, now: int) -> str:
        return await self.writer.call(binding_jobs.route_bind, conversation, session, now)

    async def route_unbind(self, conversation: Conversation) -> str:
        return await self.writer.call(binding_jobs.route_unbind, conversation)

    async def route_list(self, session: str | None) -> list[dict[str, Any]]:
        return await self.read(lambda c: bindings.bindings_of(c, session))

    def submit_chat_bind(self, cmd: binding_jobs.BindCommand, now: int) -> Pending[str]:
        return self.writer.submit(binding_jobs.chat_bind, cmd, now)
