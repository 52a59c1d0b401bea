"""The SQLite ledger's `ProposalsPort`: ledger/proposals.py's jobs on the writer."""

from __future__ import annotations

from typing import Any

from ledger import proposals
from ledger.port.records import MergeCommand, MergeResult, Reaching
from ledger.sqlite.connections import Connected
from ledger.writer.jobs import Pending


class SqliteProposals(Connected):
    async def propose_merge(
        self, by: Reaching, turn: str | None, contact: str, person: str, reason: str, now: int
    ) -> dict[str, Any] | None:
        return await self.writer.call(proposals.propose, by, turn, contact, person, reason, now)

    async def decide_merge(
        self, proposal: int, accept: bool, by: str, now: int
    ) -> tuple[dict[str, Any], MergeResult | None]:
        return await self.writer.call(proposals.decide, proposal, accept, by, now)

    def submit_chat_merge(
        self, cmd: MergeCommand, now: int
    ) -> Pending[tuple[str, MergeResult | None]]:
        return self.writer.submit(proposals.chat_merge, cmd, now)

    async def merge_proposals(
        self, status: str | None, limit: int, proposal: int | None = None
    ) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: proposals.listing(c, status, limit, proposal))
