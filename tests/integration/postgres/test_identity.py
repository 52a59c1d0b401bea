"""tests/integration/test_identity.py, run on the ledger on PostgreSQL (conftest.py)."""

from __future__ import annotations

from tests.integration.test_identity import *  # noqa: F403 - the same tests, unchanged
