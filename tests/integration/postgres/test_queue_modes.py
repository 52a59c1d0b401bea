"""tests/integration/test_queue_modes.py, run on the ledger on PostgreSQL (conftest.py)."""

from __future__ import annotations

from tests.integration.test_queue_modes import *  # noqa: F403 - the same tests, unchanged
