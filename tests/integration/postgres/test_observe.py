"""The metrics endpoint and the console's pages, run on the ledger on PostgreSQL
(conftest.py): their reads (the counts, a page of sessions, a turn tree, a turn with
its files) in the SQL both ledgers speak."""

from __future__ import annotations

from tests.integration.test_console import (  # noqa: F401 - the same tests, unchanged
    test_a_turn_page_shows_its_files_with_diffs,
    test_refusals_over_http,
)
from tests.integration.test_metrics import test_metrics_on_a_unix_socket  # noqa: F401
