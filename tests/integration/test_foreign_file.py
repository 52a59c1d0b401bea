"""No foreign files (issue 39): `ledger.path` pointing at another program's SQLite
database stops the daemon at start with exit 65 and a message naming the file and
what it holds, and leaves the file as it was, to the byte; `Store.open` refuses it
through the same check (ledger/foreign.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.api import NotALedger, SyncStore
from tests import ledger_db
from tests.harness import brokerd_once, write_config

EX_DATAERR = 65


def foreign(path: Path) -> bytes:
    with ledger_db.connect(path) as db:
        db.execute("CREATE TABLE recipes (id INTEGER PRIMARY KEY, title TEXT)")
        db.execute("CREATE TABLE sessions (id INTEGER PRIMARY KEY, cookie TEXT)")
        db.execute("INSERT INTO recipes (title) VALUES ('soup')")
    db.close()
    return path.read_bytes()


def test_the_daemon_refuses_another_program_s_database_untouched(short_tmp: Path) -> None:
    path = short_tmp / "app.db"
    before = foreign(path)
    config = short_tmp / "broker.toml"
    write_config(
        config,
        {"socket_path": str(short_tmp / "b.sock"), "ledger": {"path": str(path), "check_s": 0}},
    )
    done = brokerd_once(config)
    assert done.returncode == EX_DATAERR, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("brokerd:")]
    assert len(lines) == 1, done.stderr
    assert str(path) in lines[0] and "not a ledger" in lines[0], lines[0]
    assert "recipes" in lines[0] and "sessions" in lines[0], lines[0]
    assert path.read_bytes() == before
    assert not (short_tmp / "app.db-wal").exists()


def test_store_open_refuses_it_by_the_same_check(short_tmp: Path) -> None:
    path = short_tmp / "app.db"
    before = foreign(path)
    with pytest.raises(NotALedger, match=r"not a ledger \(its tables: recipes, sessions\)"):
        SyncStore.open(path)
    assert path.read_bytes() == before
