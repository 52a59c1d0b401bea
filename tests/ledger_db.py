"""Opening a ledger file from a test, with the driver the ledger's own code uses.

Two SQLite libraries in one process must never have the same file open: each keeps
its own record of the process's locks, so neither sees the other's, and one may
take the shared-memory index of a WAL for its own and truncate it under the other
(a bus error, or worse). The ledger opens a plain file with the standard library's
SQLite or SQLCipher's (ledger/port/cipher.py `plain_driver`), so a test that opens a
ledger file beside a Store or a writer of its own process opens it with this.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, cast

from ledger.port.cipher import plain_driver


def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
    """`sqlite3.connect`, through the ledger's driver."""
    return cast(sqlite3.Connection, plain_driver().connect(*args, **kwargs))


def mark_erasure(path: Path, entity: str) -> None:
    """The marking transaction of `entity`'s erasure, run straight on the ledger file as
    the writer runs it, and nothing after: a daemon that died just after the mark."""
    from ledger.erasure import begin
    from ledger.ingest import WriterConnection

    conn = connect(path, factory=WriterConnection, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("BEGIN IMMEDIATE")
        begin(conn, entity, entity, 1)
        conn.execute("COMMIT")
    finally:
        conn.close()
