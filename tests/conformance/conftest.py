"""The ledger port's conformance suite: every backend passes it unchanged.

A backend is a `ledger_backend` param; `port` opens a fresh, empty ledger of
that backend and hands the tests only its `LedgerPort` face.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ledger.port import LedgerPort
from ledger.store import Ledger


@pytest.fixture(params=["sqlite"])
def ledger_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def port(ledger_backend: str, tmp_path: Path) -> AsyncIterator[LedgerPort]:
    if ledger_backend == "sqlite":
        # The writer process is the default; the thread runs the same jobs and
        # starts faster, and the writer tests cover the process link.
        async with Ledger.open(tmp_path / "ledger.db", writer="thread", check_s=0) as ledger:
            yield ledger
    else:  # pragma: no cover - a new backend adds its branch here
        raise AssertionError(f"no conformance setup for {ledger_backend!r}")
