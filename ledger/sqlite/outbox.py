"""The outbox-claim methods of the SQLite ledger (`ledger/port/protocols.py` DeliveryPort), beside
`ledger/sqlite/store.py` so that the `Ledger` class stays small: a read and a job of
`ledger/outbox_claims.py`, for nodes of a cluster sharing the ledger.
"""

from __future__ import annotations

from ledger import outbox_claims
from ledger.port.protocols import OutboxRow
from ledger.port.records import OutboxKey
from ledger.sqlite.reads import ReaderPool
from ledger.writer.group_commit import LedgerWriter
from ledger.writer.jobs import Pending


class OutboxClaimMethods:
    writer: LedgerWriter

    readers: ReaderPool  # SqliteReads', beside this class in `Ledger`'s bases

    async def claimable_outbox(
        self,
        channel: str,
        node: str,
        now: int,
        lease_ms: int,
        limit: int,
        after: OutboxKey | None = None,
    ) -> list[OutboxRow]:
        rows = await self.readers.run(
            lambda c: outbox_claims.claimable_outbox(c, channel, node, now, lease_ms, limit, after)
        )
        return [OutboxRow(*row) for row in rows]

    def submit_claim_outbox(
        self, out_ids: list[str], node: str, now: int, lease_ms: int
    ) -> Pending[list[str]]:
        return self.writer.submit(outbox_claims.claim_outbox, out_ids, node, now, lease_ms)
