"""The full-text index after a delete: merged step by step to one segment, or at once
when the steps allowed run out, and then no segment holds the deleted words."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.db import connect, migrate
from ledger.erasure import merge_index, truncate_wal
from ledger.fts import forget_deleted, index_new_messages


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


@pytest.mark.parametrize("allowed", [-1, 1], ids=["stepwise", "at-once"])
def test_merged_index_holds_no_deleted_word(tmp_path: Path, allowed: int) -> None:
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
