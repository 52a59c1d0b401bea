"""A ledger whose full-text index has FTS5 secure-delete on, met by a daemon that has
only an older SQLite: refused at start with exit 65, naming the install, and not
written."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.db import connect, migrate, secure_index
from ledger.erasure import truncate_wal
from ledger.port.cipher import DRIVER_ENV, SECURE_DELETE
from tests.harness import brokerd_once, write_config

pytestmark = pytest.mark.skipif(
    sqlite3.sqlite_version_info >= SECURE_DELETE,
    reason="the standard library's SQLite has secure-delete: no older driver to force",
)


@pytest.fixture
def work() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="brk-", dir="/tmp"))  # a short socket path
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_daemon_with_only_an_older_sqlite_refuses_a_secure_index(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sqlcipher3")
    ledger = work / "ledger.db"
    monkeypatch.setenv(DRIVER_ENV, "sqlcipher3")
    conn = connect(ledger)
    migrate(conn)  # turns secure-delete on
    assert secure_index(conn)
    conn.close()
    truncate_wal(ledger)
    before = ledger.read_bytes()
    config = work / "broker.toml"
    write_config(
        config,
        {
            "socket_path": str(work / "broker.sock"),
            "ledger": {"path": str(ledger)},
            "recall": {"model_dir": ""},
        },
    )
    monkeypatch.setenv(DRIVER_ENV, "stdlib")
    done = brokerd_once(config)
    assert done.returncode == 65, done.stderr
    assert "needs SQLite 3.42.0 or later" in done.stderr, done.stderr
    assert "pip install 'agent-broker[encryption]'" in done.stderr
    assert ledger.read_bytes() == before
