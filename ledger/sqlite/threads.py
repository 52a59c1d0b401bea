"""The port's thread operations (`ledger/port/protocols.py` ThreadPort) on the SQLite ledger.

A part of `Ledger` (ledger/sqlite/store.py) of its own, so the class stays small: writes go
through its one writer, reads to a reader, as for every other operation there.
"""

from __future__ import annotations

from typing import Any, TypeVar

from ledger import resets, threads
from ledger.sqlite.reads import ReaderPool
from ledger.writer.group_commit import LedgerWriter

T = TypeVar("T")


class SqliteThreads:
    writer: LedgerWriter

    readers: ReaderPool  # SqliteReads', earlier in Ledger's bases

    async def reset_session(self, session: str, reason: str, now: int) -> int:
        return await self.writer.call(resets.reset, session, reason, now)

    async def list_threads(self, session: str) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: threads.list_threads(c, session))

    async def cancel_item(self, session: str, item: str, now: int) -> None:
        await self.writer.call(threads.cancel_item, session, item, now)
