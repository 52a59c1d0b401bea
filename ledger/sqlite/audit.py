"""The SQLite ledger's `AuditPort` (ledger/port/audit.py): a refusal's row as a writer
job of its own, and the `audit.list` read (ledger/audit.py)."""

from __future__ import annotations

from typing import Any

from ledger import audit
from ledger.port.audit import Outcome
from ledger.sqlite.connections import Connected


class SqliteAudit(Connected):
    async def audit(
        self,
        *,
        op: str,
        target: str | None,
        outcome: Outcome,
        uid: int | None,
        role: str | None,
        now: int,
    ) -> None:
        await self.writer.call(audit.append_job, now, op, target, outcome, uid, role)

    async def audit_list(
        self, since: int | None, op: str | None, limit: int
    ) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: audit.rows(c, since, op, limit))
