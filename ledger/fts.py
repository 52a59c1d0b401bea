"""The full-text index of message text, brought up to date once per write transaction.

One `INSERT ... SELECT` per transaction rather than a trigger per insert: FTS5 writes
its pending terms out as a new index segment at every statement that touches it
(docs/performance.md).

Every transaction of the ledger writer ends with `index_new_messages` (the
`Transactor` runs it before COMMIT), so every committed message is searchable and the
index never holds a message that did not commit; code that writes messages outside
the writer (tests, bench fixtures) calls it itself in the same transaction. Messages
are append-only and their ids only grow, so the index is complete up to
`fts_progress.indexed_through` and holds nothing beyond it.

`messages.id` is an INTEGER PRIMARY KEY without AUTOINCREMENT, so once the highest ids
are deleted SQLite gives them out again, at or below `indexed_through`: those
messages were never indexed, and deleting one later would feed FTS5 a 'delete' of
terms it never held ("database disk image is malformed"). So whoever deletes messages
(ledger/api/writes.py `delete`) indexes what waits first and calls `forget_deleted`
after: the index then holds exactly the messages left, up to the highest.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable


def index_new_messages(conn: sqlite3.Connection) -> int:
    """Index the messages written since the last call; return how many."""
    if getattr(conn, "full_text", None) is not None:
        return 0  # another engine's index, kept up to date by its database (ledger/postgres)
    cur = conn.execute(
        "INSERT INTO messages_fts (rowid, content) SELECT id, content FROM messages"
        " WHERE id > (SELECT indexed_through FROM fts_progress)"
    )
    added = cur.rowcount
    if added > 0:
        conn.execute("UPDATE fts_progress SET indexed_through = (SELECT max(id) FROM messages)")
    return added


def forget_deleted(conn: sqlite3.Connection) -> None:
    """Messages were deleted, every one of them indexed: the ids above the highest
    left will be given out again, and indexed then."""
    if getattr(conn, "full_text", None) is not None:
        return  # another engine's index, and ids that are never given twice
    conn.execute(
        "UPDATE fts_progress SET indexed_through = min(indexed_through,"
        " coalesce((SELECT max(id) FROM messages), 0))"
    )


def indexer_for(conn: sqlite3.Connection) -> Callable[[sqlite3.Connection], int] | None:
    """`index_new_messages` if `conn`'s database has the ledger's index, else None
    (a bare database, as in the writer's own tests)."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'fts_progress'"
    ).fetchone()
    return index_new_messages if row else None
