"""The integrity check at start (ledger/db.py): bounded in time, damage is a finding."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from ledger.db import connect, quick_check


def filled(path: Path, rows: int) -> sqlite3.Connection:
    conn = connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT UNIQUE, body TEXT)")
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO t (k, body) VALUES (?, ?)", ((f"k{n:08d}", "x" * 200) for n in range(rows))
    )
    conn.execute("COMMIT")
    return conn


def test_a_sound_file_passes_whole(tmp_path: Path) -> None:
    conn = filled(tmp_path / "l.db", 1000)
    assert quick_check(conn, 10.0) == quick_check(conn) == quick_check(conn, None)
    check = quick_check(conn, 10.0)
    assert check.problems == [] and check.finished


def test_the_time_bound_stops_the_check_and_says_so(tmp_path: Path) -> None:
    conn = filled(tmp_path / "l.db", 20_000)  # about 5 MB: far more than one look's steps
    check = quick_check(conn, 0.0)
    assert check.problems == [] and not check.finished
    assert quick_check(conn, 10.0).finished, "the handler is gone after a stopped check"


def test_damaged_pages_are_problems_not_errors(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    conn = filled(path, 5000)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    # dbstat is in the standard library's SQLite (not in SQLCipher's build); no other
    # connection to the file is open in this process, so it may open it.
    with contextlib.closing(sqlite3.connect(path)) as look:
        page = look.execute(
            "SELECT max(pageno) FROM dbstat WHERE name = 'sqlite_autoindex_t_1'"
            " AND pagetype = 'leaf'"
        ).fetchone()[0]
    with path.open("r+b") as fh:
        fh.seek((page - 1) * 4096)
        fh.write(b"\xff" * 4096)
    check = quick_check(connect(path), 10.0)
    assert check.finished and check.problems
    assert f"page {page}" in " ".join(check.problems).lower()  # "Page" before 3.4x
