"""The ledger port's conformance suite: every backend passes it unchanged.

A backend is a `ledger_backend` param; `port` opens a fresh, empty ledger of
that backend and hands the tests only its `LedgerPort` face. PostgreSQL runs
in a private cluster started once per test session (`pg_template` in
tests/conftest.py); each test gets a database of its own, copied from a
migrated template.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ledger.port import LedgerPort
from ledger.store import Ledger

_databases = itertools.count()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def port(
    ledger_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[LedgerPort]:
    if ledger_backend == "sqlite":
        # The writer process is the default; the thread runs the same jobs and
        # starts faster, and the writer tests cover the process link.
        async with Ledger.open(tmp_path / "ledger.db", writer="thread", check_s=0) as ledger:
            yield ledger
    elif ledger_backend == "postgres":
        from ledger import postgres
        from ledger.postgres import devcluster

        cluster, template = request.getfixturevalue("pg_template")
        assert isinstance(cluster, devcluster.DevCluster)
        dsn = devcluster.fresh_database(cluster, f"t{next(_databases)}", template)
        async with postgres.open(dsn) as pg:
            yield pg
    else:  # pragma: no cover - a new backend adds its branch here
        raise AssertionError(f"no conformance setup for {ledger_backend!r}")
