"""The audit table (migration 0023_audit, ledger/audit.py): append-only but for the
erasure's `forget`; the operator's export of a session carries its rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest

from ledger import audit
from ledger.db import connect, migrate
from ledger.port import cipher
from ledger.sessions import export_lines, import_lines


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    c = connect(tmp_path / "l.db", "NORMAL")
    migrate(c)
    return c


def test_rows_are_never_changed_nor_deleted(conn: sqlite3.Connection) -> None:
    audit.append(conn, at=1, op="entity.merge", target="e1", outcome="ok", uid=0, role="admin")
    for sql in (
        "UPDATE audit SET outcome = 'refused'",
        "UPDATE audit SET target = 'e2'",
        "UPDATE audit SET target = '[erased]', uid = 5",
        "DELETE FROM audit",
    ):
        with pytest.raises(cipher.IntegrityError, match="append-only"):
            conn.execute(sql)
    assert audit.rows(conn, None, None, 10) == [
        {"at": 1, "uid": 0, "role": "admin", "op": "entity.merge", "target": "e1", "outcome": "ok"}
    ]


def test_forget_replaces_a_person_s_ids_and_keeps_the_rows(conn: sqlite3.Connection) -> None:
    for target in ("e1", "dm:e1", "e2"):
        audit.append(conn, at=1, op="entity.merge", target=target, outcome="ok")
    assert audit.forget(conn, ["e1", "dm:e1"]) == 2
    assert [r["target"] for r in audit.rows(conn, None, None, 10)] == [
        "[erased]",
        "[erased]",
        "e2",
    ]


def test_an_outcome_is_ok_or_refused(conn: sqlite3.Connection) -> None:
    with pytest.raises(cipher.IntegrityError):
        conn.execute("INSERT INTO audit (id, at, op, outcome) VALUES ('x', 1, 'health', 'maybe')")


def test_a_job_that_fails_leaves_no_row(conn: sqlite3.Connection) -> None:
    def failing(c: sqlite3.Connection) -> None:
        raise ValueError("no")

    row = audit.Row(1, "session.fork", "t1", 0, "admin")
    with pytest.raises(ValueError, match="no"):
        audit.run_audited(conn, row, failing)
    assert audit.rows(conn, None, None, 10) == []
    assert audit.run_audited(conn, row, lambda c, n: n + 1, 41) == 42
    assert len(audit.rows(conn, None, None, 10)) == 1


def test_the_export_carries_the_session_s_rows(conn: sqlite3.Connection) -> None:
    conn.execute(
        "INSERT INTO sessions (label, kind, origin, status, created_at, updated_at)"
        " VALUES ('dm:e1', 'dm', 'inbound', 'active', 1, 1)"
    )
    audit.append(
        conn, at=5, op="session.compact", target="dm:e1", outcome="ok", uid=7, role="operate"
    )
    audit.append(conn, at=6, op="session.compact", target="dm:other", outcome="ok")
    lines = list(export_lines(conn, "dm:e1", 10, with_audit=True))
    assert lines[-1] == {
        "type": "audit", "at": 5, "uid": 7, "role": "operate", "op": "session.compact",
        "target": "dm:e1", "outcome": "ok",
    }  # fmt: skip
    assert not any(line["type"] == "audit" for line in export_lines(conn, "dm:e1", 10))
    label, _ = import_lines(conn, [orjson.dumps(line) for line in lines], "imported", 11)
    assert label == "imported"
    assert len(audit.rows(conn, None, "session.compact", 10)) == 3
