"""tests/integration/test_replies.py, run on the ledger on PostgreSQL (conftest.py)."""

from __future__ import annotations

from tests.integration.test_replies import *  # noqa: F403 - the same tests, unchanged
