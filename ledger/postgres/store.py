"""The PostgreSQL ledger behind the port: the SQLite ledger's parts, jobs and reads
on a PostgreSQL database.

The same single writer (ledger/writer/group_commit.py: group commit, one transaction
per batch, an ack only after COMMIT, storage failures held back and retried) runs
the same jobs on one PostgreSQL connection in a worker thread, and the reads run on
a small pool of connections of their own, in threads, as SQLite's readers do. Session
leases' renewals have a writer and a connection of their own (ledger/sqlite/leases.py):
a lease counts from its renewal's run to its answer, which the main writer's long
batches under load would stretch past the lease's time. What
is SQLite's alone has no counterpart here: no WAL file to size, no checkpointer, no
quick_check; full-text search is PostgreSQL's (recall.py). A database that cannot
be reached at open raises `LedgerUnreachable` naming the address without its
password (the daemon exits 69).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, cast

import anyio
from psycopg.conninfo import conninfo_to_dict

from ledger import inspect
from ledger.ingest import IdentityCache
from ledger.port.errors import LedgerError, LedgerUnreachable
from ledger.port.protocols import WriterStats
from ledger.port.records import LedgerReport
from ledger.postgres.connection import PgConnection
from ledger.postgres.schema import load_migrations, migrate, schema_version
from ledger.postgres.vacuum import vacuum
from ledger.sqlite.connections import ReaderPool
from ledger.sqlite.store import Ledger
from ledger.writer.group_commit import LedgerWriter, ThreadLink
from ledger.writer.transactor import Transactor


def address_of(dsn: str) -> str:
    """The DSN's server and database, without user or password, for messages."""
    try:
        parts = conninfo_to_dict(dsn)
    except Exception:
        return "the configured DSN (unparseable)"
    host = str(parts.get("host") or "localhost")
    port = parts.get("port")
    where = f"{host}:{port}" if port and not host.startswith("/") else host
    return f"postgresql://{where}/{parts.get('dbname') or ''}"


class WriterPgConnection(PgConnection):
    """The writer's connection, with the identity caches the ingest jobs use."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn, reader=False)
        self.identity = IdentityCache()


class PgLedger(Ledger):
    backend = "postgres"

    async def check(self, stuck_before: int) -> LedgerReport:
        """What `brokerctl doctor` reports: no file to check here, the rest alike."""

        def run(c: Any) -> LedgerReport:
            return inspect.activity(c, stuck_before, schema_version(c), len(load_migrations()))

        return await self.readers.run(run)

    def wal_bytes(self) -> int:
        return 0  # PostgreSQL's WAL is the server's business

    def writer_stats(self) -> WriterStats:
        w = self.writer
        return WriterStats(w.queued, w.commits, w.jobs, None, 0)

    @classmethod
    @asynccontextmanager
    async def open_pg(
        cls,
        dsn: str,
        *,
        readers: int = 2,
        write_fail_exit_s: float = math.inf,
        writer_queue: int = 100_000,
        writer_wait_s: float = 10.0,
        writer_connection: Callable[[str], WriterPgConnection] | None = None,
    ) -> AsyncIterator[PgLedger]:
        """Connect, migrate and run the ledger; the writer stops when the block exits.

        `writer_connection`: opens the writer's connection (tests cut it off).
        """
        connect_writer = writer_connection or WriterPgConnection

        def opener() -> tuple[list[str], WriterPgConnection, list[PgConnection]]:
            opened: list[PgConnection] = []
            try:
                writer = connect_writer(dsn)
                opened.append(writer)
                applied = migrate(writer)
                opened.append(WriterPgConnection(dsn))  # the leases' writer's
                for _ in range(readers):
                    opened.append(PgConnection(dsn))
            except BaseException as exc:
                for conn in opened:
                    conn.close()
                if isinstance(exc, LedgerError):
                    raise
                raise LedgerUnreachable(
                    f"cannot open the ledger at {address_of(dsn)}: {exc}"
                ) from exc
            return applied, writer, opened[1:]

        applied, writer_conn, (lease_conn, *read_conns) = await anyio.to_thread.run_sync(opener)
        transactor = Transactor(cast(Any, writer_conn), on_rollback=writer_conn.identity.clear)
        pool = ReaderPool(cast(Any, read_conns))
        link = ThreadLink(transactor)
        ledger = cls(Path(address_of(dsn)), link, pool, None, write_fail_exit_s, writer_queue)
        ledger.writer_wait_s = writer_wait_s
        ledger.location = address_of(dsn)
        ledger.vacuum = partial(vacuum, dsn)  # after an erasure or an expiry
        ledger.migrations_applied = applied
        ledger.lease_writer = LedgerWriter(
            ThreadLink(Transactor(cast(Any, lease_conn))), fail_exit_s=write_fail_exit_s
        )
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(ledger.writer.run)
                await tg.start(ledger.lease_writer.run)
                try:
                    yield ledger
                finally:
                    tg.cancel_scope.cancel()
        finally:
            ledger.readers.close()
            await ledger.lease_writer.aclose()
            await ledger.writer.aclose()


def open(  # the backend's entry point, as `Ledger.open` is SQLite's
    dsn: str,
    *,
    readers: int = 2,
    write_fail_exit_s: float = math.inf,
    writer_queue: int = 100_000,
    writer_wait_s: float = 10.0,
) -> AbstractAsyncContextManager[PgLedger]:
    """`async with ledger.postgres.open(dsn) as ledger:` a `LedgerPort` on PostgreSQL.

    `writer_queue`, `writer_wait_s`: the writer's backpressure (ledger/writer/admission.py).
    """
    return PgLedger.open_pg(
        dsn,
        readers=readers,
        write_fail_exit_s=write_fail_exit_s,
        writer_queue=writer_queue,
        writer_wait_s=writer_wait_s,
    )
