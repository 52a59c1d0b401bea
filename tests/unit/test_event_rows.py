"""The `turn_events` table's type check (migration `event_type_check`): the same
types as before, checked without a temporary table per row written."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from core.session_state import EVENT_TYPES
from ledger.db import connect, load_migrations, migrate
from ledger.port import cipher

INSERT = (
    "INSERT INTO turn_events (turn_id, seq, session_label, type, payload, created_at)"
    " VALUES (?, ?, 'dm:a', ?, '{}', ?)"
)


def test_every_event_type_is_taken_and_another_refused(conn: sqlite3.Connection) -> None:
    conn.executemany(INSERT, [("t1", n, kind, n) for n, kind in enumerate(EVENT_TYPES)])
    stored = [r[0] for r in conn.execute("SELECT type FROM turn_events ORDER BY seq")]
    assert stored == list(EVENT_TYPES)
    with pytest.raises(cipher.IntegrityError, match="CHECK"):
        conn.execute(INSERT, ("t1", 99, "thought", 99))


def test_writing_an_event_builds_no_temporary_table(conn: sqlite3.Connection) -> None:
    # An IN list of more than two values is checked through a b-tree built for each
    # row (docs/performance.md): the check must stay plain comparisons.
    program = [r[1] for r in conn.execute("EXPLAIN " + INSERT, ("t1", 0, "llm", 0))]
    assert "Insert" in program or "IdxInsert" in program
    assert "OpenEphemeral" not in program


def test_rows_written_before_the_rebuild_are_kept_with_their_indexes(tmp_path: Path) -> None:
    migrations = load_migrations()
    at = next(n for n, m in enumerate(migrations) if m.name == "event_type_check")
    c = connect(tmp_path / "l.db")
    try:
        for m in migrations[:at]:
            c.executescript(f"BEGIN;\n{m.sql}\nPRAGMA user_version = {m.version};\nCOMMIT;")
        c.executemany(INSERT, [("t1", 0, "intent", 5), ("t1", 1, "llm", 6), ("t2", 0, "error", 7)])
        columns = "SELECT turn_id, seq, session_label, type, payload, created_at FROM turn_events"
        before = c.execute(f"{columns} ORDER BY turn_id, seq").fetchall()
        assert migrate(c)[0].endswith(migrations[at].name)
        assert c.execute(f"{columns} ORDER BY turn_id, seq").fetchall() == before
        indexes = {
            r[0]
            for r in c.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'turn_events'"
                " AND sql IS NOT NULL"
            )
        }
        assert indexes == {"turn_events_session", "turn_events_type"}
    finally:
        c.close()
