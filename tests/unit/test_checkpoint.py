"""WAL checkpoints beside the writer (ledger/writer/checkpoint.py)."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.db import connect
from ledger.writer.checkpoint import WalCheckpointer
from ledger.writer.jobs import JobSpec
from ledger.writer.transactor import Transactor
from tests import ledger_db

PAGE = 4096
FRAME = PAGE + 24


def _write_pages(c: sqlite3.Connection, pages: int) -> None:
    # Incompressible rows a little under a page each: about one new page per row.
    c.executemany("INSERT INTO t (v) VALUES (?)", [(os.urandom(PAGE - 200),) for _ in range(pages)])


def _commit_pages(conn: sqlite3.Connection, pages: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    _write_pages(conn, pages)
    conn.execute("COMMIT")


def _batch(pages: int) -> list[JobSpec]:
    return [JobSpec(_write_pages, (pages,), {})]


def _wal_bytes(path: Path) -> int:
    try:
        return os.stat(f"{path}-wal").st_size
    except FileNotFoundError:
        return 0


def _within(seconds: float, done: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _limit(checkpointer: WalCheckpointer, db: Path) -> int:
    conn = ledger_db.connect(db)
    try:
        return checkpointer.wal_limit_bytes(conn)
    finally:
        conn.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "w.db"
    conn = connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
    conn.close()
    return path


@pytest.fixture
def writer(db: Path) -> Iterator[Callable[..., tuple[Transactor, WalCheckpointer]]]:
    made: list[Transactor] = []

    def make(**kwargs: Any) -> tuple[Transactor, WalCheckpointer]:
        checkpointer = WalCheckpointer(db, **kwargs)
        transactor = Transactor(connect(db), checkpointer=checkpointer)
        made.append(transactor)
        return transactor, checkpointer

    yield make
    for transactor in made:
        transactor.close()


def test_the_writers_commits_never_checkpoint(db: Path) -> None:
    conn = connect(db)
    WalCheckpointer(db).attach(conn)  # attached, never started: nobody checkpoints
    for _ in range(30):
        _commit_pages(conn, 100)
    # SQLite's own checkpoint (every 1,000 frames) would have started the WAL over.
    assert _wal_bytes(db) > 2500 * FRAME
    conn.close()


def test_commits_are_copied_into_the_database_in_the_background(
    db: Path, writer: Callable[..., tuple[Transactor, WalCheckpointer]]
) -> None:
    transactor, checkpointer = writer(interval_s=0.001)
    before = db.stat().st_size
    for _ in range(5):
        assert transactor.execute(_batch(20)) == [(None, None)]
    # Only a checkpoint writes pages into the database file itself; the pass is
    # counted once its call returns, a moment after the file has grown.
    assert _within(10, lambda: db.stat().st_size >= before + 100 * PAGE)
    assert _within(10, lambda: checkpointer.passes >= 1)
    assert checkpointer.failures == 0


def test_the_wal_starts_over_under_steady_writes(
    db: Path, writer: Callable[..., tuple[Transactor, WalCheckpointer]]
) -> None:
    transactor, checkpointer = writer(interval_s=0.001, restart_frames=64)
    batches = 0
    seen = 0
    after_restarts: list[int] = []  # the WAL's size after a commit that followed a restart
    # Back-to-back transactions leave no moment with every frame copied, so only
    # the catch-up under the writer's lock lets the WAL start over.
    while batches < 400 or (checkpointer.restarts < 3 and batches < 20_000):
        transactor.execute(_batch(4))
        batches += 1
        if checkpointer.restarts > seen:
            seen = checkpointer.restarts
            transactor.execute(_batch(4))  # certainly a commit after the restart
            batches += 1
            after_restarts.append(_wal_bytes(db))
    assert checkpointer.restarts >= 3
    written = batches * 4 * FRAME
    assert written > 1500 * FRAME
    # However far the WAL grew before a restart (back-to-back writes outrun the
    # thread's passes), the commit after it trims the file back to the limit.
    assert after_restarts and max(after_restarts) <= _limit(checkpointer, db) < written


def test_a_wal_that_starts_over_is_written_over_in_place(db: Path) -> None:
    conn = connect(db)
    checkpointer = WalCheckpointer(db, restart_frames=64)
    checkpointer.attach(conn)  # not started: the passes run here, between commits
    limit = checkpointer.wal_limit_bytes(conn)
    for _ in range(3):
        for _ in range(18):
            _commit_pages(conn, 4)  # past the restart size by a few frames, as usual
        longest = _wal_bytes(db)
        assert 32 + 64 * FRAME < longest < limit
        restarts = checkpointer.restarts
        checkpointer.run_pass()
        assert checkpointer.restarts == restarts + 1
        _commit_pages(conn, 1)  # starts the WAL over
        # the file keeps its length (an ftruncate here cost the writer 0.9-3.4 ms).
        assert _wal_bytes(db) == longest
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (3 * (18 * 4 + 1),)
    conn.close()
    checkpointer.stop()


def test_a_wal_that_grew_far_past_the_limit_is_trimmed_back(db: Path) -> None:
    conn = connect(db)
    checkpointer = WalCheckpointer(db, restart_frames=16)
    checkpointer.attach(conn)
    limit = checkpointer.wal_limit_bytes(conn)
    for _ in range(20):
        _commit_pages(conn, 10)  # no pass ran meanwhile (say, a reader held an old snapshot)
    assert _wal_bytes(db) > 4 * limit
    checkpointer.run_pass()
    assert checkpointer.restarts == 1
    _commit_pages(conn, 1)
    assert _wal_bytes(db) == limit
    conn.close()
    checkpointer.stop()


def test_a_failing_checkpoint_fails_no_write(
    db: Path, writer: Callable[..., tuple[Transactor, WalCheckpointer]]
) -> None:
    transactor, checkpointer = writer(interval_s=3600)
    checkpointer._conn.close()  # the fault: every checkpoint now raises sqlite3.Error
    checkpointer.run_pass()
    checkpointer.run_pass()
    assert checkpointer.failures == 2 and checkpointer.failing == 2
    assert checkpointer.last_error is not None and "closed" in checkpointer.last_error
    assert transactor.execute(_batch(1)) == [(None, None)]
    check = ledger_db.connect(db)
    assert check.execute("SELECT count(*) FROM t").fetchone() == (1,)
    check.close()


def test_close_stops_the_thread_and_leaves_every_commit_readable(
    db: Path, writer: Callable[..., tuple[Transactor, WalCheckpointer]]
) -> None:
    transactor, checkpointer = writer(interval_s=0.001)
    for _ in range(10):
        transactor.execute(_batch(3))
    transactor.close()
    assert not checkpointer._thread.is_alive()
    check = ledger_db.connect(db)
    assert check.execute("SELECT count(*) FROM t").fetchone() == (30,)
    assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    check.close()


def test_stop_gives_up_on_a_stuck_checkpoint_without_closing_under_it(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ledger.writer.checkpoint.STOP_TIMEOUT_S", 0.2)
    checkpointer = WalCheckpointer(db, interval_s=0.001, restart_frames=0)
    checkpointer.start()
    with checkpointer.writing:  # the catch-up waits for this lock: the thread is stuck
        checkpointer.committed()
        assert _within(10, lambda: checkpointer.passes >= 1)
        started = time.monotonic()
        checkpointer.stop()
        assert time.monotonic() - started < 5
        assert checkpointer._thread.is_alive()
    checkpointer._thread.join(10)
    assert not checkpointer._thread.is_alive()
    assert checkpointer.restarts == 1 and checkpointer.failures == 0  # its connection was left open
    checkpointer._conn.close()
