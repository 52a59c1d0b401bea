"""The SQLite ledger's part of the port's `HandoffPort`: a read of the items no
runtime has recorded as handed over, and the lazy record of a landed hand-off."""

from __future__ import annotations

import functools

from ledger import handoffs
from ledger.port.records import ItemInfo
from ledger.sqlite.reads import ReaderPool
from ledger.writer.group_commit import LedgerWriter
from ledger.writer.jobs import Pending


class HandoffMethods:
    writer: LedgerWriter
    readers: ReaderPool

    async def unhanded_items(self, before_ms: int, limit: int) -> list[ItemInfo]:
        return await self.readers.run(
            functools.partial(handoffs.unhanded_items, before_ms=before_ms, limit=limit)
        )

    async def unhanded_before(self, session: str, seq: int) -> list[ItemInfo]:
        return await self.readers.run(
            functools.partial(handoffs.unhanded_before, session=session, seq=seq)
        )

    def submit_items_handed(self, item_ids: list[str], now: int) -> Pending[None]:
        # Lazy: it commutes with every other write (it only fills an empty column).
        return self.writer.submit_lazy(handoffs.mark_handed, item_ids, now)
