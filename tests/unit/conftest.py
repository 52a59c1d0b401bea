"""Fixtures shared by the unit tests: a migrated ledger in a temporary directory."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.db import connect, migrate


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def conn(db_path: Path, ledger_template: Path) -> Iterator[sqlite3.Connection]:
    """A connection to a fresh ledger with every migration applied (a copy of the
    session's migrated template: migrating is mostly waiting on the disk)."""
    shutil.copyfile(ledger_template, db_path)
    c = connect(db_path)
    assert migrate(c) == []
    yield c
    c.close()
