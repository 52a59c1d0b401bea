"""The SQLite ledger's `LeasePort`: session leases for a cluster's turns
(ledger/leases.py).

Each taking and renewal is one job on the writer, waited for: the answer is what the
caller acts on, and it holds only once committed. A renewal runs at the end of the
next batch (`submit_last`: it commutes with every other job) of `lease_writer`, so
its answer comes soon after it ran, the time that counts against the lease, however
long the writer's queue. On SQLite that is the one writer; on PostgreSQL a writer of
its own on a connection of its own (ledger/postgres/store.py), whose batches hold
renewals only, so a busy writer's long batches do not delay them. Renewing a taking
already committed, it needs no order with the writer's other jobs: a release that
commits first makes it refused, as it should be. A release is a lazy job that joins
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
        job = self.lease_writer.submit_last(leases.renew, session, token, now, ttl_ms)
        return await job.result()

    def submit_release_lease(self, session: str, token: int) -> Pending[None]:
        return self.writer.submit_lazy(leases.release, session, token)
