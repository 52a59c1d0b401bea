"""The full-text index is written once per writer transaction (ledger/fts.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ledger.db import connect, load_migrations, migrate
from ledger.fts import index_new_messages
from ledger.port.errors import NotFound
from ledger.sqlite.store import Ledger, WriterKind

pytestmark = pytest.mark.anyio


# Writer jobs are module-level functions: they may travel to the writer process.
def _write_turn(conn: sqlite3.Connection, session: str, turn: str, texts: list[str]) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO sessions (label, kind, origin, created_at, updated_at)"
        " VALUES (?, 'dm', 'inbound', 0, 0)",
        (session,),
    )
    conn.execute(
        "INSERT INTO turns (id, session_label, type, status, started_at, completed_at)"
        " VALUES (?, ?, 'turn', 'completed', 0, 1)",
        (turn, session),
    )
    conn.executemany(
        "INSERT INTO messages (turn_id, seq, role, content, created_at)"
        " VALUES (?, ?, 'user', ?, 0)",
        [(turn, n, text) for n, text in enumerate(texts)],
    )


def _write_turn_then_fail(conn: sqlite3.Connection, session: str, turn: str, text: str) -> None:
    _write_turn(conn, session, turn, [text])
    raise NotFound("the job changed its mind", field="turn")


def _matches(conn: sqlite3.Connection, word: str) -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT m.content FROM messages_fts f JOIN messages m ON m.id = f.rowid"
            " WHERE messages_fts MATCH ? ORDER BY m.id",
            (word,),
        )
    ]


def _check_index(conn: sqlite3.Connection) -> None:
    """FTS5's own check that the index matches the messages table exactly."""
    conn.execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)")


@pytest.mark.parametrize("writer", ["process", "thread"])
async def test_what_a_batch_commits_is_searchable_and_what_fails_is_not(
    tmp_path: Path, writer: WriterKind
) -> None:
    path = tmp_path / "ledger.db"
    async with Ledger.open(path, writer=writer) as ledger:
        first = ledger.writer.submit(_write_turn, "dm:a", "t1", ["walrus one", "pelican"])
        failing = ledger.writer.submit(_write_turn_then_fail, "dm:a", "t2", "walrus ghost")
        second = ledger.writer.submit(_write_turn, "dm:b", "t3", ["walrus two"])
        await first.result()
        await second.result()
        with pytest.raises(NotFound):
            await failing.result()
        # Readers see it as soon as the job's result is in: it was in the commit.
        found = await ledger.readers.run(lambda c: _matches(c, "walrus"))
        assert found == ["walrus one", "walrus two"]
        later = ledger.writer.submit(_write_turn, "dm:a", "t4", ["walrus three"])
        await later.result()
        assert await ledger.readers.run(lambda c: _matches(c, "walrus")) == [
            "walrus one",
            "walrus two",
            "walrus three",
        ]
    conn = connect(path)
    _check_index(conn)
    (through,) = conn.execute("SELECT indexed_through FROM fts_progress").fetchone()
    assert through == conn.execute("SELECT max(id) FROM messages").fetchone()[0]
    conn.close()


def test_an_older_ledger_keeps_its_index_and_indexes_on_after_the_migration(
    tmp_path: Path,
) -> None:
    conn = connect(tmp_path / "old.db")
    for m in load_migrations()[:3]:  # the schema before 0004: a trigger per insert
        conn.executescript(f"BEGIN;\n{m.sql}\nPRAGMA user_version = {m.version};\nCOMMIT;")
    conn.execute("BEGIN")
    _write_turn(conn, "dm:a", "t1", ["albatross before"])
    conn.execute("COMMIT")
    assert _matches(conn, "albatross") == ["albatross before"]  # by the old trigger

    assert "0004_fts_per_transaction" in migrate(conn)
    conn.execute("BEGIN")
    _write_turn(conn, "dm:a", "t2", ["albatross after"])
    assert index_new_messages(conn) == 1  # only the new one: nothing indexed twice
    conn.execute("COMMIT")
    assert _matches(conn, "albatross") == ["albatross before", "albatross after"]
    assert index_new_messages(conn) == 0
    _check_index(conn)
    conn.close()
