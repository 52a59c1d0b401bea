"""The MCP narrowing a worker inherits (tests/integration/test_mcp_tools.py), read from
the ledger on PostgreSQL (conftest.py): the worker's parents are found by its rows."""

from __future__ import annotations

import pytest

from tests.integration.test_mcp_tools import (  # noqa: F401 - the same test, unchanged
    test_a_worker_gets_at_most_the_servers_of_the_session_it_came_from,
)

pytestmark = pytest.mark.anyio
