"""The ledger on PostgreSQL: a second implementation of the ledger port.

`async with ledger.postgres.open(dsn) as ledger:` gives a `LedgerPort`, as
`ledger.sqlite.store.Ledger.open(path)` does for SQLite, and passes the same
conformance suite (tests/conformance/).

Why psycopg 3 and not asyncpg: the ledger's jobs are plain synchronous
functions over a DB-API connection, run as one transaction per batch in the
writer's thread (ledger/writer/group_commit.py, transactor.py), and the reads run the same
way in reader threads. psycopg 3's synchronous connection fits that model
unchanged, so one set of jobs serves both engines; asyncpg is async only and
would need every job rewritten as a coroutine, or a thread running a loop of
its own. psycopg's `ClientCursor` also binds parameters on the client, which
spares us PostgreSQL's type inference for SQLite-style `? IS NULL`.
"""

from __future__ import annotations

from ledger.port.errors import LedgerUnreachable
from ledger.postgres.store import PgLedger, open

__all__ = ["LedgerUnreachable", "PgLedger", "open"]
