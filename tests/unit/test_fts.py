"""The full-text index is written once per writer transaction (ledger/fts.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ledger.db import connect, load_migrations, migrate
from ledger.errors import NotFound
from ledger.fts import index_new_messages
from ledger.store import Ledger, WriterKind

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


def _instances(conn: sqlite3.Connection, schema: str, table: str) -> list[tuple[object, ...]]:
    vocab = f"temp.{table}_instances"
    conn.execute(f"CREATE VIRTUAL TABLE {vocab} USING fts5vocab({schema}, {table}, instance)")
    return conn.execute(
        f"SELECT term, doc, col, offset FROM {vocab} ORDER BY 1, 2, 3, 4"
    ).fetchall()


def _check_index(conn: sqlite3.Connection) -> None:
    """The index is whole (FTS5's own check) and holds exactly the words of
    `messages_text` (word, message, position), compared with an index made
    afresh from it. FTS5's check against its content table ('integrity-check'
    with rank 1) cannot read a view that calls json_tree (migration
    *_fts_item_text), so the comparison is made here."""
    conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")
    conn.execute("CREATE VIRTUAL TABLE temp.fresh USING fts5(content, content = '')")
    conn.execute("INSERT INTO temp.fresh (rowid, content) SELECT id, content FROM messages_text")
    try:
        indexed = _instances(conn, "main", "messages_fts")
        assert indexed == _instances(conn, "temp", "fresh")
        assert indexed  # every caller checks an index that holds words
    finally:
        conn.execute("DROP TABLE temp.fresh_instances")
        conn.execute("DROP TABLE temp.messages_fts_instances")
        conn.execute("DROP TABLE temp.fresh")


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


def _write_library_turn(conn: sqlite3.Connection, turn: str, items: list[str]) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO sessions (label, kind, origin, created_at, updated_at)"
        " VALUES ('lib', 'library', 'library', 0, 0)"
    )
    conn.execute(
        "INSERT INTO turns (id, session_label, type, status, engine, started_at, completed_at)"
        " VALUES (?, 'lib', 'turn', 'completed', 'library', 0, 0)",
        (turn,),
    )
    conn.executemany(
        "INSERT INTO messages (turn_id, seq, role, content, created_at)"
        " VALUES (?, ?, 'user', ?, 0)",
        [(turn, n, item) for n, item in enumerate(items)],
    )


def test_a_library_item_is_indexed_by_its_words_not_its_json(tmp_path: Path) -> None:
    conn = connect(tmp_path / "ledger.db")
    migrate(conn)
    message = '{"role": "user", "content": "zebra crossing", "type": "message"}'
    parts = (
        '{"type": "message", "role": "assistant", "content":'
        ' [{"type": "output_text", "text": "giraffe necks", "annotations": []}]}'
    )
    call = '{"type": "function_call", "name": "lookup", "arguments": "{\\"city\\": \\"oslo\\"}"}'
    conn.execute("BEGIN")
    _write_library_turn(conn, "t1", [message, parts, call, '"a plain string item"', "[1, 2]"])
    _write_turn(conn, "dm:a", "t2", ['{"role": "user"} typed by a person'])
    assert index_new_messages(conn) == 6
    conn.execute("COMMIT")

    assert _matches(conn, "zebra") == [message]
    assert _matches(conn, "giraffe") == [parts]
    assert _matches(conn, "oslo") == [call]  # a string value holding JSON: its words
    assert _matches(conn, "plain") == ['"a plain string item"']
    # The keys and the role/type values every item repeats are not words of it;
    # a daemon message's text is indexed as it is, whatever it looks like.
    assert _matches(conn, "role") == ['{"role": "user"} typed by a person']
    assert _matches(conn, "message") == _matches(conn, "output_text") == []
    assert _matches(conn, "annotations") == []
    snippet = conn.execute(
        "SELECT snippet(messages_fts, 0, '[', ']', '', 4) FROM messages_fts"
        " WHERE messages_fts MATCH 'giraffe'"
    ).fetchone()[0]
    assert snippet == "[giraffe] necks"
    _check_index(conn)

    # The triggers give FTS5 back exactly what it indexed (the view, read before
    # the row goes): an edit and a delete leave the index whole.
    conn.execute("BEGIN")
    conn.execute(
        "UPDATE messages SET content = ? WHERE content = ?",
        ('{"role": "user", "content": "okapi"}', message),
    )
    conn.execute("DELETE FROM messages WHERE content = ?", (parts,))
    conn.execute("COMMIT")
    assert _matches(conn, "zebra") == _matches(conn, "giraffe") == []
    assert _matches(conn, "okapi") == ['{"role": "user", "content": "okapi"}']
    _check_index(conn)
    conn.close()


def test_the_migration_reindexes_a_library_ledger_by_item_words(tmp_path: Path) -> None:
    conn = connect(tmp_path / "old.db")
    before = [m for m in load_migrations() if m.name != "fts_item_text"]
    for m in before:
        conn.executescript(f"BEGIN;\n{m.sql}\nPRAGMA user_version = {m.version};\nCOMMIT;")
    conn.execute("BEGIN")
    _write_library_turn(conn, "t1", ['{"role": "user", "content": "walrus"}'])
    _write_turn(conn, "dm:a", "t2", ["a message about a walrus"])
    conn.execute(  # as ledger/fts.py indexed before the migration: the content whole
        "INSERT INTO messages_fts (rowid, content) SELECT id, content FROM messages"
    )
    conn.execute("UPDATE fts_progress SET indexed_through = (SELECT max(id) FROM messages)")
    conn.execute("COMMIT")
    assert len(_matches(conn, "role")) == 1  # the item's key "role" was a word of it

    assert [n for n in migrate(conn) if n.endswith("_fts_item_text")]
    assert _matches(conn, "role") == []
    item = '{"role": "user", "content": "walrus"}'
    assert _matches(conn, "walrus") == [item, "a message about a walrus"]
    conn.execute("BEGIN")
    _write_library_turn(conn, "t3", ['{"role": "user", "content": "walrus again"}'])
    assert index_new_messages(conn) == 1  # indexed on from where the migration left it
    conn.execute("COMMIT")
    _check_index(conn)
    conn.close()
