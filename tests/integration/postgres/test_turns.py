"""tests/integration/test_turns.py, run on the ledger on PostgreSQL (conftest.py)."""

from __future__ import annotations

from tests.integration.test_turns import *  # noqa: F403 - the same tests, unchanged
