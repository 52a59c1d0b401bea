"""The SQLite ledger's `NamesPort`: ledger/names.py's jobs on the writer."""

from __future__ import annotations

from typing import Any

from ledger import names
from ledger.sqlite.connections import Connected


class SqliteNames(Connected):
    async def name_entity(
        self, entity: str, name: str, kind: str | None, now: int
    ) -> dict[str, Any]:
        return await self.writer.call(names.name_entity, entity, name, kind, now)

    async def entity_show(self, entity: str) -> dict[str, Any]:
        return await self.readers.run(lambda c: names.entity_show(c, entity))

    async def add_alias(self, alias: str, session: str, now: int) -> dict[str, Any]:
        return await self.writer.call(names.add_alias, alias, session, now)
