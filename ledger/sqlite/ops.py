"""The SQLite ledger's `OpsPort`, less the writer's state (which is `Ledger`'s own,
in `ledger/sqlite/store.py`): forks, the scratchpad, export and import, and what
`brokerctl doctor` reports.

An export is read as one snapshot on one reader, and an import is one job on the
writer, so a session is never seen half imported.
"""

from __future__ import annotations

from typing import Any

from ledger import events, inspect, sessions
from ledger.port.records import LedgerReport
from ledger.sqlite.connections import Connected


class SqliteOps(Connected):
    async def fork(self, turn_id: str, label: str | None, now: int) -> str:
        return await self.writer.call(sessions.fork, turn_id, label, now)

    async def scratchpad_merge(self, session: str, patch: dict[str, Any], now: int) -> Any:
        return await self.writer.call(events.scratchpad_merge, session, patch, now)

    async def export_session(self, label: str, now: int) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: sessions.export_snapshot(c, label, now))

    async def import_session(
        self, lines: list[bytes], label: str | None, now: int
    ) -> tuple[str, int]:
        return await self.writer.call(sessions.import_lines, lines, label, now)

    async def check(self, stuck_before: int) -> LedgerReport:
        """What `brokerctl doctor` reports of the file (ledger/inspect.py)."""
        return await self.readers.run(lambda c: inspect.report(c, stuck_before))
