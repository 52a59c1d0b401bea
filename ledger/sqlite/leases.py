"""The SQLite ledger's `LeasePort`: session leases for a cluster's turns
(ledger/leases.py).

Each taking and renewal is one job on the writer, waited for: the answer is what the
caller acts on, and it holds only once committed. A renewal runs at the end of the
writer's next batch (`submit_last`: it commutes with every other job), so its answer
comes soon after it ran, the time that counts against the lease, however long the
writer's queue. A release is a lazy job that joins
the writer's next batch: a taking on the same node comes after it in that batch, and
one on another node that comes first finds the lease held and looks again soon.
"""

from __future__ import annotations

from ledger import leases
from ledger.port.records import LeaseTaking
from ledger.sqlite.connections import Connected
from ledger.writer.jobs import Pending


class SqliteLeases(Connected):
    async def take_lease(
        self, session: str, holder: str, now: int | None, ttl_ms: int
    ) -> LeaseTaking:
        return await self.writer.call(leases.take, session, holder, now, ttl_ms)

    async def renew_lease(
        self, session: str, token: int, now: int | None, ttl_ms: int
    ) -> int | None:
        return await self.writer.submit_last(leases.renew, session, token, now, ttl_ms).result()

    def submit_release_lease(self, session: str, token: int) -> Pending[None]:
        return self.writer.submit_lazy(leases.release, session, token)
