"""The SQLite ledger's `ResumePort`: ledger/resume.py's read on a reader."""

from __future__ import annotations

from typing import Any

from ledger import resume
from ledger.sqlite.connections import Connected


class SqliteResume(Connected):
    async def person_sessions(self, entity: str, limit: int) -> dict[str, Any]:
        return await self.readers.run(lambda c: resume.person_sessions(c, entity, limit))
