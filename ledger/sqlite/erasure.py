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
VACUUMED = (
    "messages", "tool_calls", "turn_events", "turns", "inbound", "queue_items", "outbox",
    "file_snapshots", "blobs", "compactions", "turn_state", "turn_progress", "sessions",
    "contacts", "entities", "timers", "timer_firings", "scratchpad", "session_history",
    "session_aliases", "route_bindings", "bridge_notes", "thread_seeds", "threads",
    "person_activity", "dispatches", "adk_sessions", "embeddings",
)  # fmt: skip


def vacuum(dsn: str) -> None:
    """VACUUM the tables an erasure touches, so dead tuples leave their pages; then the
    planner's statistics of the messages' words, gathered again without what was
    deleted, and the old ones' bytes out of `pg_statistic` (PG migration 0020). What
    the server skips for want of rights (a role that owns neither the tables nor the
    database) is logged as a warning; the CHECKPOINT, which a role needs
    `pg_checkpoint` for, is left to the server's next one where it may not."""
    import psycopg

    def skipped(diag: psycopg.errors.Diagnostic) -> None:
        if diag.severity == "WARNING":
            log.warning("PostgreSQL skipped a step of the clean-up", notice=diag.message_primary)

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(skipped)
        for table in VACUUMED:
            conn.execute(f"VACUUM (FULL) {table}")  # a new file: no dead tuple's bytes stay
        conn.execute("ANALYZE messages")
        conn.execute("VACUUM (FULL) pg_catalog.pg_statistic")
        may = conn.execute(
            "SELECT rolsuper OR CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname ="
            " 'pg_checkpoint') THEN pg_has_role('pg_checkpoint', 'USAGE') ELSE false END"
            " FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        if may is not None and may[0]:
            conn.execute("CHECKPOINT")  # the files as they are now, for whoever reads them


class SqliteErasure(Connected):
    """The ErasurePort on the ledger's writer."""

    path: Path
    key: Key | None = None  # an encrypted ledger's
    dsn: str | None = None  # set by the PostgreSQL ledger

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
        if self.dsn is not None:
            vacuum(self.dsn)
        else:
            truncate_wal(self.path, self.key)
