"""`expire_before` on the ledger (ledger/port/retention.py): the batches of
ledger/retention.py through the writer, then the full-text index merged and the
bytes cleared as after an erasure (ledger/sqlite/erasure.py)."""

from __future__ import annotations

import time
from collections.abc import Mapping

import anyio

from ledger import retention
from ledger.erasure import merge_index
from ledger.port.retention import SessionRoute
from ledger.sqlite.connections import Connected
from plumbing import logs

log = logs.get("ledger.retention")


class SqliteRetention(Connected):
    def _scrub(self) -> None: ...  # SqliteErasure's

    async def session_routes(self) -> list[SessionRoute]:
        rows = await self.readers.run(retention.session_routes)
        return [SessionRoute(*row) for row in rows]

    async def expire_before(
        self, cutoff: int | None, now: int, cutoffs: Mapping[str, int | None] | None = None
    ) -> int:
        started = time.monotonic()
        expired, batches, after = 0, 0, None
        own = dict(cutoffs or {})
        while True:
            count, after = await self.writer.call(retention.expire_batch, cutoff, after, now, own)
            expired, batches = expired + count, batches + 1
            if after is None:
                break
        if expired:
            out: str | None = None
            while True:
                out = await self.writer.call(retention.expire_outbox, out)
                if out is None:
                    break
            left = -1
            while left != 0:
                left = await self.writer.call(merge_index, left)
            await anyio.to_thread.run_sync(self._scrub)
        log.info(
            "expiry done",
            expired_turns=expired,
            batches=batches,
            seconds=round(time.monotonic() - started, 3),
        )
        return expired
