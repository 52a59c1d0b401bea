"""`entity.erase` on the ledger (ledger/port/erasure.py): the jobs of ledger/erasure.py,
one at a time through the writer, then the bytes.

Each step is its own writer job, so other sessions' writes are committed between
them. After the last step the WAL, which still holds the pages as they were
written, is checkpointed and truncated from a connection of its own (a
checkpoint cannot run inside the writer's transactions); on PostgreSQL the
tables an erasure touches are vacuumed instead, outside any transaction. The
erasure is marked finished only after that, so a crash anywhere before it
resumes the erasure at its next step and clears the bytes again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import anyio

from ledger import erasure
from ledger.erasure import truncate_wal
from ledger.port.cipher import Key
from ledger.port.erasure import Marked
from ledger.sqlite.connections import Connected
from plumbing import logs
from plumbing.ids import now_ms

log = logs.get("ledger.erasure")


class SqliteErasure(Connected):
    """The ErasurePort on the ledger's writer."""

    path: Path
    key: Key | None = None  # an encrypted ledger's
    # Set by the PostgreSQL ledger: its tables' VACUUM (ledger/postgres/vacuum.py), which
    # clears the bytes instead of the WAL's truncation.
    vacuum: Callable[[], None] | None = None

    async def erase_entity(
        self, entity: str, confirm: str, now: int, marked: Marked | None = None
    ) -> dict[str, int]:
        plan = await self.writer.call(erasure.begin, entity, confirm, now)
        log.info("erasure marked", entity=entity, sessions=len(plan.sessions))
        if marked is not None:
            try:
                await marked(plan.sessions)
            except Exception:  # the erasure goes on: it must not stay half done
                log.exception("stopping what ran for an erased person failed", entity=entity)
        return await self._complete(entity)

    async def resume_erasure(self) -> dict[str, int | str] | None:
        entity = await self.writer.call(erasure.running)
        if entity is None:
            return None
        log.warning("resuming an erasure a stop cut off", entity=entity)
        counts = await self._complete(str(entity))
        return {"entity": str(entity), **counts}

    async def _complete(self, entity: str) -> dict[str, int]:
        started = time.monotonic()
        steps = 1
        while await self.writer.call(erasure.step, entity):
            steps += 1
        await self.writer.settled()
        await anyio.to_thread.run_sync(self._scrub)
        counts = await self.writer.call(erasure.finish, entity, now_ms())
        log.info(
            "erasure done",
            entity=entity,
            steps=steps,
            seconds=round(time.monotonic() - started, 3),
            **counts,
        )
        return counts

    def _scrub(self) -> None:
        if self.vacuum is not None:
            self.vacuum()
        else:
            truncate_wal(self.path, self.key)
