"""The bytes of what an erasure or an expiry deleted, cleared on PostgreSQL: the
tables they touch rewritten, the planner's statistics of the messages' words gathered
again and the old ones rewritten out of `pg_statistic` (PG migration 0020). The
SQLite ledger truncates its WAL instead (ledger/erasure.py `truncate_wal`)."""

from __future__ import annotations

from ledger.postgres.connection import connect_pg

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
    with connect_pg(dsn) as conn:  # it logs the server's warnings: what it skipped
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
