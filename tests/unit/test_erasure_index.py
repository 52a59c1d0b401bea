"""The full-text index after a delete. With SQLite's older than 3.42 (the standard
library's forced here): merged step by step to one segment, or at once when the steps
allowed run out, and then no segment holds the deleted words. With a newer one (FTS5
secure-delete, turned on at migration): no segment holds them from the delete on, and
no merge is asked for. An SQLite without secure-delete refuses an index that has it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ledger.db import connect, migrate, secure_index
from ledger.erasure import merge_index, truncate_wal, whole_merge_due
from ledger.fts import forget_deleted, index_new_messages
from ledger.port.cipher import DRIVER_ENV, SECURE_DELETE
from ledger.port.errors import LedgerError

needs_secure = pytest.mark.skipif(
    sqlite3.sqlite_version_info >= SECURE_DELETE,
    reason="the standard library's SQLite has secure-delete: no older driver to force",
)


def _ledger(path: Path) -> None:
    conn = connect(path)
    migrate(conn)
    conn.execute(
        "INSERT INTO turns (id, session_label, type, status, started_at, completed_at)"
        " VALUES ('t', 's', 'turn', 'completed', 1, 2)"
    )
    for n in range(12):  # a segment per transaction
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO messages (turn_id, seq, role, content, created_at)"
            " VALUES ('t', ?, 'user', ?, 1)",
            (n, f"zqxsecret{n}zz words of message {n}"),
        )
        index_new_messages(conn)
        conn.execute("COMMIT")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("DELETE FROM messages WHERE seq < 6")
    forget_deleted(conn)
    conn.execute("COMMIT")
    conn.close()


def _raw(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


@needs_secure
@pytest.mark.parametrize("allowed", [-1, 1], ids=["stepwise", "at-once"])
def test_merged_index_holds_no_deleted_word(
    tmp_path: Path, allowed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DRIVER_ENV, "stdlib")
    path = tmp_path / "l.db"
    _ledger(path)
    assert b"zqxsecret0zz" in _raw(path)
    conn = connect(path)
    left, steps = allowed, 0
    while True:
        conn.execute("BEGIN IMMEDIATE")
        left = merge_index(conn, left)
        conn.execute("COMMIT")
        steps += 1
        if left == 0:
            break
    conn.close()
    truncate_wal(path)
    data = _raw(path)
    assert not any(f"zqxsecret{n}zz".encode() in data for n in range(6))
    assert all(f"zqxsecret{n}zz".encode() in data for n in range(6, 12))
    if allowed == 1:
        assert steps == 1


def test_with_secure_delete_no_segment_holds_a_deleted_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sqlcipher3")
    monkeypatch.setenv(DRIVER_ENV, "sqlcipher3")  # SQLite 3.53, plain without a key
    path = tmp_path / "l.db"
    _ledger(path)
    conn = connect(path)
    assert secure_index(conn)
    assert merge_index(conn) == 0  # nothing to merge: the words left as they went
    conn.close()
    truncate_wal(path)
    data = _raw(path)
    assert not any(f"zqxsecret{n}zz".encode() in data for n in range(6))
    assert all(f"zqxsecret{n}zz".encode() in data for n in range(6, 12))


@needs_secure
def test_an_older_sqlite_refuses_an_index_with_secure_delete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sqlcipher3")
    monkeypatch.setenv(DRIVER_ENV, "sqlcipher3")
    path = tmp_path / "l.db"
    _ledger(path)
    truncate_wal(path)
    before = path.read_bytes()
    monkeypatch.setenv(DRIVER_ENV, "stdlib")
    for readonly in (False, True):
        with pytest.raises(LedgerError, match=r"needs SQLite 3\.42\.0 or later.*pip install"):
            connect(path, readonly=readonly)
    assert path.read_bytes() == before  # nothing written


def test_secure_delete_is_turned_on_once_for_a_ledger_made_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DRIVER_ENV, "stdlib")
    path = tmp_path / "l.db"
    _ledger(path)  # its deletes merged nothing yet
    conn = connect(path)
    on = secure_index(conn)
    conn.close()
    assert on == (sqlite3.sqlite_version_info >= SECURE_DELETE)
    pytest.importorskip("sqlcipher3")
    monkeypatch.setenv(DRIVER_ENV, "sqlcipher3")
    for _ in range(2):  # idempotent
        conn = connect(path)
        migrate(conn)
        assert secure_index(conn)
        assert conn.execute(
            "SELECT count(*) FROM messages_fts_config WHERE k = 'secure-delete'"
        ).fetchone() == (1,)
        conn.close()


def test_words_deleted_before_the_switch_go_with_the_next_whole_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger made without secure-delete whose deletes merged nothing: turning the
    option on leaves those words in old segments, so one whole merge is due, and the
    next merge (an erasure's or an expiry's) takes them out and is then no more due."""
    pytest.importorskip("sqlcipher3")
    monkeypatch.setenv(DRIVER_ENV, "stdlib")
    path = tmp_path / "l.db"
    _ledger(path)
    if sqlite3.sqlite_version_info >= SECURE_DELETE:
        pytest.skip("the standard library's SQLite has secure-delete: no ledger without it")
    monkeypatch.setenv(DRIVER_ENV, "sqlcipher3")
    conn = connect(path)
    migrate(conn)  # turns the option on
    assert secure_index(conn) and whole_merge_due(conn)
    conn.close()
    truncate_wal(path)
    assert b"zqxsecret0zz" in _raw(path)  # deleted, still in an old segment
    conn = connect(path)
    left = merge_index(conn)
    while left:
        left = merge_index(conn, left)
    assert not whole_merge_due(conn)
    assert merge_index(conn) == 0  # and later merges ask nothing again
    conn.close()
    truncate_wal(path)
    raw = _raw(path)
    assert not any(f"zqxsecret{n}zz".encode() in raw for n in range(6))
    assert b"zqxsecret6zz" in raw  # what was not deleted stays


def test_a_new_ledger_owes_no_whole_merge(tmp_path: Path) -> None:
    conn = connect(tmp_path / "l.db")
    migrate(conn)
    assert not whole_merge_due(conn)
    conn.close()
