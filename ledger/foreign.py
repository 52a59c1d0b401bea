"""No foreign files: the one check, made by both the daemon's start and `Store.open`,
that an existing SQLite file is a ledger before anything opens it for writing.

The file is only read, through a read-only connection, and left as it was, to the
byte (not switched to WAL mode, nothing created in it). A database is a ledger when
its schema version says so and it holds the ledger's tables; one at version 0 that
holds any table, or at a later version without them, is another program's and is
refused with `NotALedger`, naming the file and the tables it holds.
"""

from __future__ import annotations

from pathlib import Path

from ledger.db import damaged, is_damage, open_file, readonly_uri
from ledger.port.cipher import DatabaseError, Key
from ledger.port.errors import LedgerError, NotALedger

SQLITE_HEADER = b"SQLite format 3\x00"
LEDGER_TABLES = frozenset({"sessions", "turns", "messages"})
SHOWN = 5  # tables named in the message


def schema_of(path: Path, key: Key | None = None) -> int | None:
    """The ledger schema version of the file at `path`, or None when there is no
    ledger yet (no file, or an empty one) or no SQLite database to look into (a ledger
    whose header is damaged, or a file of another kind: `Store.open` refuses it first,
    the daemon finds it damaged). Raises `NotALedger` for another program's
    database, `LedgerDamaged` for one SQLite cannot read; reads only. With `key`, an
    encrypted file is looked into with it (a wrong key raises the LedgerError that
    says so)."""
    if not path.exists() or path.is_dir() or path.stat().st_size == 0:
        return None
    with path.open("rb") as f:
        plain = f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    if not plain and key is None:
        return None
    try:
        conn = open_file(path, readonly_uri(path), True, None if plain else key)
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            tables = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master")}
        finally:
            conn.close()
    except DatabaseError as exc:
        if is_damage(exc):
            raise damaged(path, [str(exc)]) from exc
        raise LedgerError(f"cannot read the ledger {path}: {exc}") from exc
    named = sorted(t for t in tables if not t.startswith("sqlite_"))
    if (version == 0 and named) or (version > 0 and not tables >= LEDGER_TABLES):
        shown = ", ".join(named[:SHOWN]) + (
            f" and {len(named) - SHOWN} more" if len(named) > SHOWN else ""
        )
        raise NotALedger(
            f"the file {path} is an SQLite database but not a ledger"
            f" (its tables: {shown or 'none'}). The file was not touched"
        )
    return version if named else None
