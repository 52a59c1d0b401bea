"""tests/integration/test_protocol.py, run on the ledger on PostgreSQL (conftest.py)."""

from __future__ import annotations

from tests.integration.test_protocol import *  # noqa: F403 - the same tests, unchanged
