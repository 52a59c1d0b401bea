"""The SQLite ledger's `RoutePort`: route bindings made, removed and listed.

Each write is one job of `ledger/binding_jobs.py`: a `/fork` or `/switch` writes
its fork, its binding, its command item's end and its reply in one transaction, and
a session of another person is refused with nothing written.
"""

from __future__ import annotations

from typing import Any

from core.bindings import Conversation
from ledger import binding_jobs, bindings
from ledger.port.records import BindCommand
from ledger.sqlite.connections import Connected
from ledger.writer.jobs import Pending


class SqliteRoutes(Connected):
    async def route_bind(self, conversation: Conversation, session: str, now: int) -> str:
        return await self.writer.call(binding_jobs.route_bind, conversation, session, now)

    async def route_unbind(self, conversation: Conversation) -> str:
        return await self.writer.call(binding_jobs.route_unbind, conversation)

    async def route_list(self, session: str | None) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: bindings.bindings_of(c, session))

    def submit_chat_bind(self, cmd: BindCommand, now: int) -> Pending[str]:
        return self.writer.submit(binding_jobs.chat_bind, cmd, now)
