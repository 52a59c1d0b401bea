"""The SQLite ledger's `HandoffPort`: which queued items reached their session's
runtime (a Temporal workflow), for a cluster whose nodes may die between an ack and
its hand-off (ledger/handoffs.py).

The record of a landed hand-off is a lazy job: nobody waits on it and it only fills
an empty column, so it commutes with every other write and joins the writer's next
batch. A lost record costs one redundant signal, which the workflow ignores.
"""

from __future__ import annotations

import functools

from ledger import handoffs
from ledger.port.records import ItemInfo
from ledger.sqlite.connections import Connected
from ledger.writer.jobs import Pending


class SqliteHandoffs(Connected):
    async def unhanded_items(self, before_ms: int, limit: int) -> list[ItemInfo]:
        return await self.readers.run(
            functools.partial(handoffs.unhanded_items, before_ms=before_ms, limit=limit)
        )

    async def unhanded_before(self, session: str, seq: int) -> list[ItemInfo]:
        return await self.readers.run(
            functools.partial(handoffs.unhanded_before, session=session, seq=seq)
        )

    def submit_items_handed(self, item_ids: list[str], now: int) -> Pending[None]:
        return self.writer.submit_lazy(handoffs.mark_handed, item_ids, now)
