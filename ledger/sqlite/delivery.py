"""The SQLite ledger's `DeliveryPort`: the replies' outbox, as `broker/deliveries.py`
sends and confirms them, and the claims of the nodes of a cluster sharing the ledger.

A confirmation is a lazy job: nobody waits on it and it commutes with every other
write, so it joins the writer's next batch rather than making one. A claim is a
job of `ledger/outbox_claims.py` whose update re-checks the claim, so two nodes
never both win the same reply.
"""

from __future__ import annotations

import functools

from ledger import outbox_claims, turns
from ledger.port.protocols import OutboxRow
from ledger.port.records import OutboxKey
from ledger.sqlite.connections import Connected
from ledger.writer.jobs import Pending


class SqliteDelivery(Connected):
    def submit_delivered(self, out_ids: list[str], now: int) -> Pending[int]:
        # Lazy (ledger/writer/group_commit.py): it commutes with every other job.
        return self.writer.submit_lazy(turns.mark_delivered, out_ids, now)

    async def pending_outbox(
        self, channel: str, limit: int, after: OutboxKey | None = None
    ) -> list[OutboxRow]:
        rows = await self.readers.run(
            functools.partial(turns.pending_outbox, channel=channel, limit=limit, after=after)
        )
        return [OutboxRow(*row) for row in rows]

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
