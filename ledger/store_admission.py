"""The port's `admit` (ledger/port.py Rule 2) on the SQLite ledger: a part of
`ledger/store.py` `Ledger`, kept apart to keep it small."""

from __future__ import annotations

from .writer import LedgerWriter


class AdmittedWrites:
    writer: LedgerWriter
    writer_wait_s = 10.0  # the bound on a wait for room (ledger.writer_wait_s)

    def has_room(self) -> bool:
        return self.writer.has_room()

    async def admit(self) -> None:
        await self.writer.admit(self.writer_wait_s)
