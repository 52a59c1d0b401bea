"""The SQLite ledger's `LeasePort`: session leases for a cluster's turns
(ledger/leases.py).

Each taking, renewal and release is one job on the writer, waited for: the answer is
what the caller acts on, and it holds only once committed.
"""

from __future__ import annotations

from ledger import leases
from ledger.port.records import LeaseTaking
from ledger.sqlite.connections import Connected


class SqliteLeases(Connected):
    async def take_lease(self, session: str, holder: str, now: int, ttl_ms: int) -> LeaseTaking:
        return await self.writer.call(leases.take, session, holder, now, ttl_ms)

    async def renew_lease(self, session: str, token: int, now: int, ttl_ms: int) -> bool:
        return await self.writer.call(leases.renew, session, token, now, ttl_ms)

    async def release_lease(self, session: str, token: int) -> None:
        await self.writer.call(leases.release, session, token)
