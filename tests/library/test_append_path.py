"""The append's own path: three statements a turn (writes.py Rule 1b) and the
full-text index asked about only when it may be due (engine.py Rule 5a)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ledger.api import NotFound, Store
from ledger.api.engine import FTS_LAG, IndexWhenDue

pytestmark = pytest.mark.anyio


def _rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


async def test_appends_chain_their_turns_and_count_them(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    async with await Store.open(path) as store:
        first = await store.append("s", ["a", "b"])
        second = await store.append("s", ["c"])
        info = await store.get("s")
        assert (info.turns, info.head_turn) == (2, second)
        assert await store.items("s") == ["a", "b", "c"]
        with pytest.raises(NotFound):
            await store.append("ghost", ["x"], create=False)
    parents = {row[0]: row[1] for row in _rows(path, "SELECT id, parent_id FROM turns")}
    assert parents == {first: None, second: first}  # the refused append left no turn
    assert _rows(path, "SELECT count(*) FROM sessions WHERE label = 'ghost'") == [(0,)]


async def test_the_index_never_lags_fts_lag_messages(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    async with await Store.open(path) as store:
        lags: list[int] = []
        for n in range(FTS_LAG):  # two messages a turn: FTS_LAG turns index twice over
            await store.append("s", [{"role": "user", "content": f"w{n}"}, "answer"])
            [(lag,)] = _rows(
                path, "SELECT (SELECT max(id) FROM messages) - indexed_through FROM fts_progress"
            )
            assert isinstance(lag, int)
            lags.append(lag)
    assert max(lags) < FTS_LAG
    assert lags.count(0) >= 2  # it did index, more than once


def _bare_ledger() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, content TEXT NOT NULL);"
        "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content = 'messages',"
        " content_rowid = 'id');"
        "CREATE TABLE fts_progress (only_row INTEGER PRIMARY KEY, indexed_through INTEGER);"
        "INSERT INTO fts_progress VALUES (1, 0);"
    )
    return conn


def _write(conn: sqlite3.Connection, n: int) -> None:
    conn.executemany("INSERT INTO messages (content) VALUES (?)", [("word",)] * n)


def _waiting(conn: sqlite3.Connection) -> int:
    row = conn.execute(
        "SELECT (SELECT max(id) FROM messages) - indexed_through FROM fts_progress"
    ).fetchone()
    return int(row[0])


def test_the_index_is_asked_for_once_the_changes_may_reach_the_lag() -> None:
    conn, due = _bare_ledger(), IndexWhenDue()
    _write(conn, FTS_LAG - 1)
    assert due(conn) == 0  # asked: FTS_LAG - 1 wait, not due yet
    _write(conn, 1)
    assert due(conn) == FTS_LAG
    assert _waiting(conn) == 0


def test_after_a_rollback_the_index_is_asked_for_at_the_next_commit() -> None:
    conn, due = _bare_ledger(), IndexWhenDue()
    _write(conn, 200)
    assert due(conn) == 0  # 200 committed, waiting
    conn.execute("BEGIN")
    _write(conn, 100)
    assert due(conn) == 300  # indexed in the transaction that then rolls back
    conn.execute("ROLLBACK")
    due.forget()  # what the Transactor's rollback hook does
    _write(conn, 60)
    assert due(conn) == 260  # without forget, 60 changes since its answer would not ask
    assert _waiting(conn) == 0
