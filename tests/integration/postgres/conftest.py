"""The integration tests of this directory run the real daemon on the ledger on
PostgreSQL: each daemon a test starts gets `[ledger] kind = "postgres"` and a
database of its own, copied from the migrated template of the session's private
cluster (`pg_template`, tests/conftest.py).

The test modules here import the tests of an SQLite module whole and run them
unchanged, as a second configuration (marked `postgres`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_databases = itertools.count()
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.postgres)


@pytest.fixture
def daemon_ledger(pg_template: tuple[Any, str]) -> Callable[[str], dict[str, Any]]:
    from ledger.postgres import devcluster

    cluster, template = pg_template

    def postgres(name: str) -> dict[str, Any]:
        dsn = devcluster.fresh_database(cluster, f"d{next(_databases)}", template)
        return {"kind": "postgres", "dsn": dsn}

    return postgres
