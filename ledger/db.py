"""Opening the ledger file and migrating its schema.

Rule 1: every connection runs in WAL mode with foreign keys on, in
        autocommit mode: transactions are opened explicitly by the writer.
Rule 2: migrations are numbered SQL files applied in order, each in its own
        transaction together with the `user_version` bump, so a crash leaves
        the schema at a whole version. A ledger newer than this code is refused.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

Synchronous = Literal["NORMAL", "FULL"]


class LedgerError(Exception):
    """The ledger cannot be used (schema too new, file unreadable, ...)."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations() -> list[Migration]:
    out = []
    for entry in resources.files("ledger.migrations").iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            out.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    out.sort(key=lambda m: m.version)
    for expected, migration in enumerate(out, start=1):
        if migration.version != expected:
            raise LedgerError(f"migration numbering has a gap at {migration.name}")
    return out


def connect(
    path: Path | str,
    synchronous: Synchronous = "NORMAL",
    *,
    readonly: bool = False,
    factory: type[sqlite3.Connection] = sqlite3.Connection,
) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(
            f"file:{path}?mode=ro",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            factory=factory,
        )
    else:
        conn = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, factory=factory
        )
    conn.execute("PRAGMA busy_timeout = 5000")
    if not readonly:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise LedgerError(f"could not switch {path} to WAL mode (got {mode})")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute("PRAGMA cache_size = -65536")
    return conn


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply pending migrations; return the names applied."""
    migrations = load_migrations()
    current = schema_version(conn)
    latest = migrations[-1].version if migrations else 0
    if current > latest:
        raise LedgerError(
            f"ledger schema version {current} is newer than this broker knows ({latest}); "
            "refusing to touch it"
        )
    applied = []
    for migration in migrations[current:]:
        # executescript commits first, so wrap the whole file and the version
        # bump in one explicit transaction.
        try:
            conn.executescript(
                f"BEGIN IMMEDIATE;\n{migration.sql}\n"
                f"PRAGMA user_version = {migration.version};\nCOMMIT;"
            )
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        applied.append(f"{migration.version:04d}_{migration.name}")
    return applied


def integrity_check(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("PRAGMA quick_check").fetchall()
    return [str(r[0]) for r in rows if r[0] != "ok"]
