"""Fixtures shared by the unit tests: a migrated ledger in a temporary directory."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.db import connect, migrate


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def conn(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A connection to a fresh ledger with every migration applied."""
    c = connect(db_path)
    migrate(c)
    yield c
    c.close()
