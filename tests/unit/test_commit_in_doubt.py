"""Commits that got no answer (ledger/writer/transactor.py), on a connection that
plays the part of PostgreSQL's: its COMMIT commits and then raises as a lost server
does, and its verdict says what happened, or that it can never be known.

Pure Transactor, real SQLite underneath: no server needed, every path reachable.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.port.errors import LedgerWriteFailed, StorageFailed
from ledger.writer.jobs import JobSpec, resume_writes
from ledger.writer.transactor import Transactor


def lost(message: str) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = sqlite3.SQLITE_IOERR  # as the PostgreSQL link reports it
    return error


class DoubtfulConnection(sqlite3.Connection):
    """Its next `cuts` COMMITs commit, then raise as if the answer was lost."""

    in_doubt: object = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cuts = 0
        self.verdicts: list[Callable[[], bool]] = []

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        cursor = super().execute(sql, *args)
        if sql == "COMMIT" and self.cuts:
            self.cuts -= 1
            self.in_doubt = object()
            raise lost("server closed the connection unexpectedly")
        return cursor

    def commit_verdict(self) -> bool:
        return self.verdicts.pop(0)()


@pytest.fixture
def conn(tmp_path: Path) -> DoubtfulConnection:
    c = sqlite3.connect(tmp_path / "t.db", isolation_level=None, factory=DoubtfulConnection)
    assert isinstance(c, DoubtfulConnection)
    c.execute("CREATE TABLE t (v TEXT)")
    return c


def insert(value: str) -> JobSpec:
    def job(c: sqlite3.Connection) -> str:
        c.execute("INSERT INTO t (v) VALUES (?)", (value,))
        return value

    return JobSpec(job, (), {})


def resumed(*jobs: JobSpec) -> list[JobSpec]:
    return [JobSpec(resume_writes, (), {}), *jobs]


def written(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT v FROM t ORDER BY rowid")]


def committed() -> bool:
    return True


def unknowable() -> bool:
    raise sqlite3.OperationalError("the outcome of transaction 7 is unknown")


def test_a_commit_that_committed_unanswered_is_not_run_again(conn: DoubtfulConnection) -> None:
    a = insert("a")
    conn.cuts, conn.verdicts = 1, [committed]
    transactor = Transactor(conn)
    [(_, failure)] = transactor.execute([a])
    assert isinstance(failure, StorageFailed)
    outcomes = transactor.execute(resumed(a))
    assert outcomes == [(None, None), ("a", None)]
    assert written(conn) == ["a"]


def test_settled_jobs_keep_their_outcome_when_a_later_doubt_is_never_known(
    conn: DoubtfulConnection,
) -> None:
    """a commits unanswered and is settled as committed; b, run in the batch that
    brings a back, commits unanswered too, and that doubt can never be known. b's
    caller is told it failed (it may have committed); a's is told what a did, not
    that it failed: it committed, and a turn told otherwise abandons its reply."""
    a, b = insert("a"), insert("b")
    transactor = Transactor(conn)
    conn.cuts, conn.verdicts = 2, [committed, unknowable]
    [(_, failure)] = transactor.execute([a])
    assert isinstance(failure, StorageFailed)
    again = transactor.execute(resumed(a, b))
    assert all(isinstance(f, StorageFailed) for _, f in again)  # b in doubt: all come again
    outcomes = transactor.execute(resumed(a, b))
    assert outcomes[1] == ("a", None)
    assert isinstance(outcomes[2][1], LedgerWriteFailed)
    assert not isinstance(outcomes[2][1], StorageFailed)
    assert written(conn) == ["a", "b"]  # b did commit: its caller's retry is a duplicate
    assert transactor.execute([insert("c")]) == [("c", None)]  # and writes go on
