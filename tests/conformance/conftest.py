"""The ledger port's conformance suite: every backend passes it unchanged.

A backend is a `ledger_backend` param; `port` opens a fresh, empty ledger of
that backend and hands the tests only its `LedgerPort` face. PostgreSQL runs
in a private cluster started once per test session (`pg_template` in
tests/conftest.py); each test gets the suite's database emptied (faster than a
new database per test, and as empty).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ledger.port.protocols import LedgerPort
from ledger.sqlite.store import Ledger


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# The queue of writes of `small_queue_port`, and its bound on a wait for room.
SMALL_QUEUE = 4
SMALL_QUEUE_WAIT_S = 5.0


@pytest.fixture(scope="session")
def pg_conformance_db(pg_template: tuple[Any, str]) -> str:
    """One database for the suite, emptied before each test (`pg_conformance`)."""
    from ledger.postgres import devcluster

    cluster, template = pg_template
    return devcluster.fresh_database(cluster, "conformance", template)


@pytest.fixture
def pg_conformance(pg_conformance_db: str) -> str:
    """The DSN of an empty ledger database: the suite's, emptied (tests run one at a
    time within a session, each with its own cluster)."""
    from ledger.postgres import devcluster

    devcluster.empty_database(pg_conformance_db)
    return pg_conformance_db


@pytest.fixture
async def port(
    ledger_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[LedgerPort]:
    async with open_port(ledger_backend, tmp_path, request) as ledger:
        yield ledger


@pytest.fixture
async def small_queue_port(
    ledger_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[LedgerPort]:
    """A port whose queue of writes holds SMALL_QUEUE (ledger/port/protocols.py)."""
    async with open_port(
        ledger_backend,
        tmp_path,
        request,
        writer_queue=SMALL_QUEUE,
        writer_wait_s=SMALL_QUEUE_WAIT_S,
    ) as ledger:
        yield ledger


@contextlib.asynccontextmanager
async def open_port(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, **bounds: Any
) -> AsyncIterator[LedgerPort]:
    if backend == "sqlite":
        # The writer process is the default; the thread runs the same jobs and
        # starts faster, and the writer tests cover the process link.
        async with Ledger.open(
            tmp_path / "ledger.db", writer="thread", check_s=0, **bounds
        ) as ledger:
            yield ledger
    elif backend == "postgres":
        from ledger import postgres

        async with postgres.open(request.getfixturevalue("pg_conformance"), **bounds) as pg:
            yield pg
    else:  # pragma: no cover - a new backend adds its branch here
        raise AssertionError(f"no conformance setup for {backend!r}")
