"""The port's `admit` (ledger/port/protocols.py Rule 2) on the SQLite ledger: a part of
`ledger/sqlite/store.py` `Ledger`, kept apart to keep it small."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from ledger.writer.group_commit import LedgerWriter


class AdmittedWrites:
    writer: LedgerWriter
    writer_wait_s = 10.0  # the bound on a wait for room (ledger.writer_wait_s)

    def has_room(self) -> bool:
        return self.writer.has_room()

    def admit(self) -> Coroutine[Any, Any, None]:
        # The writer's own wait, handed back to be awaited: no coroutine around it.
        return self.writer.admit(self.writer_wait_s)
