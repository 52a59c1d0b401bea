"""The PostgreSQL ledger's schema: its own numbered migrations.

Migrations are numbered SQL files in `ledger/postgres/migrations/`, applied in order,
each in one transaction with the version bump in `ledger_schema`, so a crash leaves
the schema at a whole version. Nodes that open the same database at once take turns
(an advisory lock held by the migrating transaction), and a database newer than this
code is refused, as SQLite's is (ledger/db.py).
"""

from __future__ import annotations

from ledger import db
from ledger.db import Migration
from ledger.port.errors import LedgerError
from ledger.postgres.connection import PgConnection

MIGRATION_LOCK = 0x6C656467  # "ledg": any constant the nodes agree on


def load_migrations() -> list[Migration]:
    return db.load_migrations("ledger.postgres.migrations")


def schema_version(conn: PgConnection) -> int:
    row = conn.execute("SELECT max(version) FROM ledger_schema").fetchone()
    return int(row[0] or 0)


def migrate(conn: PgConnection, through: int | None = None) -> list[str]:
    """Apply pending migrations (those up to version `through` when given); return the
    names applied."""
    migrations = load_migrations()
    latest = migrations[-1].version if migrations else 0
    applied = []
    conn.execute("CREATE TABLE IF NOT EXISTS ledger_schema (version integer NOT NULL)")
    for migration in migrations:
        conn.execute("BEGIN")
        try:
            conn.execute(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
            current = schema_version(conn)
            if current > latest:
                raise LedgerError(
                    f"ledger schema version {current} is newer than this broker knows "
                    f"({latest}); refusing to touch it"
                )
            if current < migration.version and (through is None or migration.version <= through):
                conn.executescript(migration.sql)
                conn.execute("INSERT INTO ledger_schema (version) VALUES (?)", (migration.version,))
                applied.append(f"{migration.version:04d}_{migration.name}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return applied
