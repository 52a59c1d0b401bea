"""A PostgreSQL connection with the face of the `sqlite3.Connection` the jobs use.

The ledger's jobs and reads take a connection and call `execute`,
`executemany`, `fetchone`/`fetchall`, `rowcount` and `lastrowid` on it. This
class gives them that on psycopg 3, so one set of jobs serves both backends.
Statements are translated once each (dialect.py) and bound on the client
(`ClientCursor`), so SQLite's untyped `? IS NULL` reaches the server as a literal;
sums of integers come back as int, as in SQLite, not as Decimal.

Errors come out as the `sqlite3` exceptions the shared code already handles, so no
write is ever dropped: a unique or foreign-key violation is `IntegrityError`; a lost
or refused connection, or the server's own I/O error (SQLSTATE class 58), is an
`OperationalError` whose `sqlite_errorcode` is SQLITE_IOERR, which the writer holds
back and retries after a back-off (`storage_error`, ledger/writer/jobs.py); a write
refused by a server that is a standby now (a failover) is SQLITE_READONLY, retried
alike on a new connection that can find the new primary; a deadlock or serialization
failure against another node's writer is SQLITE_BUSY, rolled back by the server and
retried alike. A lost connection is opened again at the next statement outside a
transaction; a statement that cannot change anything and was outside a transaction
(a reader's SELECT, the writer's BEGIN) runs once more on a new connection after the
server ended the session, so readers survive a server restart; inside a transaction
the loss fails the transaction, which the writer retries whole.

A COMMIT whose answer was lost may have committed: the transaction's id, taken just
before it, is kept (`in_doubt`), and `commit_verdict` asks the server, once it can be
reached, whether it committed, so the writer never runs a committed batch twice nor
drops one that did not commit (ledger/writer/transactor.py); an id "in the future"
(a server that crashed before the transaction reached its WAL) did not commit. The
writer's session commits synchronously whatever the server's default (with
`synchronous_commit = off` a server crash would lose acked writes). No wait on the
server is unbounded: TCP keepalives and a user timeout (unless the DSN sets its own)
end a connection whose server stopped answering within about half a minute; the
writer's session asks the server to end it when idle in a transaction (a node that
vanished mid-batch, its row locks held); and a verdict whose transaction is still in
progress ends that lost session (matched by its transaction id, so no other is
touched) and asks again.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any

import psycopg
import psycopg.errors
from psycopg import ClientCursor, pq
from psycopg.adapt import Loader
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import RowMaker, tuple_row

from ledger.forgotten import shadow_pg
from ledger.postgres.dialect import Statement, translate
from ledger.postgres.recall import FullText
from plumbing import logs

CONNECT_TIMEOUT_S = 5
# libpq's TCP settings, where the DSN names none of its own. A silent peer
# is dropped after 10 s idle + 3 probes 5 s apart; unacknowledged data after 30 s.
TCP_BOUNDS = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}
# a writer's transaction never waits between its statements; 30 s idle
# inside one means its client is gone.
WRITER_IDLE_IN_TRANSACTION = "30s"
ORPHAN_EXIT_MS = 2000  # how long the verdict waits for the lost session to end
_READ_ONLY = re.compile(r"\s*(SELECT|WITH|SHOW|BEGIN)\b", re.IGNORECASE)
_WRITES = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE|INTO|FOR\s+UPDATE)\b", re.IGNORECASE)
SERIALIZATION_FAILURE, DEADLOCK_DETECTED = "40001", "40P01"
INVALID_PARAMETER_VALUE = "22023"  # SQLSTATE of pg_xact_status on an id never assigned
READ_ONLY_SQL_TRANSACTION = "25006"  # a write on a standby
log = logs.get("ledger.postgres")


class _NumericLoader(Loader):
    """numeric → int when whole, else float."""

    def load(self, data: Buffer) -> int | float:
        value = Decimal(bytes(data).decode())
        return int(value) if value == value.to_integral_value() else float(value)


Buffer = bytes | bytearray | memoryview


def _as_sqlite_error(exc: psycopg.Error, lost: bool = False) -> sqlite3.Error:
    """The sqlite3 exception the shared code expects for `exc`; `lost`: the
    connection is gone with it."""
    out: sqlite3.Error
    code = exc.sqlstate or ""
    if isinstance(exc, psycopg.errors.IntegrityError):
        out = sqlite3.IntegrityError(str(exc))
    elif code == READ_ONLY_SQL_TRANSACTION:  # a standby now: the primary is elsewhere
        out = sqlite3.OperationalError(str(exc))
        out.sqlite_errorcode = sqlite3.SQLITE_READONLY
    elif (
        lost
        or code.startswith(("08", "57P", "58"))  # connection; shutting down; the server's I/O
        or (isinstance(exc, psycopg.OperationalError) and not code)  # no server to answer
    ):
        out = sqlite3.OperationalError(f"PostgreSQL unreachable: {exc}")
        out.sqlite_errorcode = sqlite3.SQLITE_IOERR
    elif code.startswith("53"):  # insufficient resources: disk full, out of memory
        out = sqlite3.OperationalError(str(exc))
        out.sqlite_errorcode = sqlite3.SQLITE_FULL
    elif code in (SERIALIZATION_FAILURE, DEADLOCK_DETECTED):
        # Another session's transaction (another node's writer) won: the server rolled
        # this one back, and it may run again, as SQLite's BUSY.
        out = sqlite3.OperationalError(str(exc))
        out.sqlite_errorcode = sqlite3.SQLITE_BUSY
    else:  # the statement's own fault (a bug): fails its job, never retried
        out = sqlite3.OperationalError(str(exc))
    return out


def _harmless_again(sql: str) -> bool:
    """Whether `sql`, run outside a transaction, changes nothing: it may run twice."""
    return bool(_READ_ONLY.match(sql)) and not _WRITES.search(sql)


def _xact_status(conn: psycopg.Connection[Any], xid: str) -> str | None:
    row = conn.execute("SELECT pg_xact_status(%s::xid8)", (xid,)).fetchone()
    return row[0] if row else None


def connect_pg(dsn: str) -> psycopg.Connection[Any]:
    given = conninfo_to_dict(dsn)
    bounded = make_conninfo(dsn, **{k: v for k, v in TCP_BOUNDS.items() if k not in given})
    conn = psycopg.connect(
        bounded, autocommit=True, cursor_factory=ClientCursor, connect_timeout=CONNECT_TIMEOUT_S
    )
    conn.adapters.register_loader("numeric", _NumericLoader)
    conn.add_notice_handler(_log_warning)
    return conn


def _log_warning(diag: psycopg.errors.Diagnostic) -> None:
    """A server WARNING (a migration's, a VACUUM skipped for want of rights) goes to the
    log; psycopg drops notices nobody handles. Lesser notices stay unlogged."""
    if diag.severity_nonlocalized == "WARNING":
        log.warning("the PostgreSQL server warned", notice=diag.message_primary)


class PgCursor:
    """What a job reads back from `execute`: rows, `rowcount`, `lastrowid`."""

    def __init__(self, cur: psycopg.Cursor[Any], lastrowid: int | None) -> None:
        self._cur = cur
        self.lastrowid = lastrowid
        self.rowcount = cur.rowcount

    @property
    def description(self) -> Any:
        return self._cur.description

    def fetchone(self) -> Any:
        return self._cur.fetchone() if self._cur.description is not None else None

    def fetchall(self) -> list[Any]:
        return self._cur.fetchall() if self._cur.description is not None else []

    def fetchmany(self, size: int = 1) -> list[Any]:
        return self._cur.fetchmany(size) if self._cur.description is not None else []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class Row(tuple[Any, ...]):
    """A row read by position or by column name, as `sqlite3.Row` is."""

    names: tuple[str, ...] = ()

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return super().__getitem__(self.names.index(key))
        return super().__getitem__(key)

    def keys(self) -> list[str]:
        return list(self.names)


def named_row(cursor: psycopg.Cursor[Any]) -> RowMaker[Row]:
    names = tuple(c.name for c in cursor.description or ())

    def make(values: Sequence[Any]) -> Row:
        row = Row(values)
        row.names = names
        return row

    return make


def _params(params: Sequence[Any]) -> tuple[Any, ...]:
    # SQLite stores a bool as 0 or 1; PostgreSQL would refuse true in an integer column.
    return tuple(int(p) if isinstance(p, bool) else p for p in params)


class PgConnection:
    """One PostgreSQL session used the way the jobs use an sqlite3 connection."""

    locks_rows = True  # other nodes write the same rows: a job may lock one it reads

    def __init__(self, dsn: str, *, reader: bool = True) -> None:
        self._dsn = dsn
        self._reader = reader
        self._conn: psycopg.Connection[Any] | None = None
        self._row_factory: Any = None
        self._warned_async = False
        # The id of the transaction whose COMMIT got no answer.
        self.in_doubt: str | None = None
        self.full_text = FullText()  # the shared recall code searches through it (recall.py)
        self._reconnect()

    def _reconnect(self) -> psycopg.Connection[Any]:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        try:
            self._conn = connect_pg(self._dsn)
            if self._reader:
                shadow_pg(self._conn)  # an erasure's person is gone from its mark on
            else:
                self._commit_synchronously(self._conn)
                self._conn.execute(
                    f"SET idle_in_transaction_session_timeout = '{WRITER_IDLE_IN_TRANSACTION}'"
                )
        except psycopg.Error as exc:
            raise _as_sqlite_error(exc) from exc
        return self._conn

    def _commit_synchronously(self, conn: psycopg.Connection[Any]) -> None:
        """Commit synchronously, whatever the server's default: no acked write lost."""
        row = conn.execute("SHOW synchronous_commit").fetchone()
        if row is not None and row[0] == "off":
            if not self._warned_async:
                log.warning(
                    "the server's synchronous_commit is off; the ledger's writes"
                    " commit synchronously anyway (an ack must mean durable)"
                )
                self._warned_async = True
            conn.execute("SET synchronous_commit = on")

    def lost(self) -> bool:
        conn = self._conn
        return conn is None or conn.closed or conn.broken

    def _live(self, sql: str) -> psycopg.Connection[Any]:
        if self.lost():
            if not (self._reader or sql.lstrip().upper().startswith("BEGIN")):
                # Inside a transaction that the loss ended: it must fail whole.
                raise _as_sqlite_error(psycopg.OperationalError("the connection was lost"))
            return self._reconnect()
        assert self._conn is not None
        return self._conn

    @property
    def row_factory(self) -> Any:
        return self._row_factory

    @row_factory.setter
    def row_factory(self, factory: Any) -> None:
        # Any factory (sqlite3.Row in the shared code) means rows by position or name.
        self._row_factory = factory

    @property
    def in_transaction(self) -> bool:
        if self.lost():
            return False  # what the loss interrupted is gone with it
        assert self._conn is not None
        return self._conn.info.transaction_status != pq.TransactionStatus.IDLE

    def execute(self, sql: str, params: Sequence[Any] = ()) -> PgCursor:
        statement = translate(sql)
        conn = self._live(sql)
        if statement.sql.strip().upper() == "COMMIT" and not self._reader:
            return self._commit(conn)
        if statement.param_order is not None:
            given = list(params)  # once, not once per placeholder
            params = [given[i] for i in statement.param_order]
        idle = conn.info.transaction_status == pq.TransactionStatus.IDLE
        try:
            return self._statement(conn, statement, params)
        except psycopg.Error as exc:
            lost = self._lost_after(exc)
            if not (lost and idle and _harmless_again(statement.sql)):
                raise _as_sqlite_error(exc, lost) from exc
        # the server ended the session since its last statement (a restart).
        conn = self._reconnect()
        try:
            return self._statement(conn, statement, params)
        except psycopg.Error as exc:
            raise _as_sqlite_error(exc, self.lost()) from exc

    def _lost_after(self, exc: psycopg.Error) -> bool:
        """Whether the connection is gone after `exc`; one on a standby is let go."""
        if exc.sqlstate == READ_ONLY_SQL_TRANSACTION and self._conn is not None:
            self._conn.close()  # the next transaction connects anew, perhaps to the primary
        return self.lost()

    def _statement(
        self, conn: psycopg.Connection[Any], statement: Statement, params: Sequence[Any]
    ) -> PgCursor:
        cur = conn.cursor(row_factory=named_row if self._row_factory else tuple_row)
        self._send(cur, statement.sql, _params(params))
        lastrowid = None
        if statement.rowid_column is not None:
            row: Any = cur.fetchone()
            lastrowid = row[0] if row else None
        return PgCursor(cur, lastrowid)

    def _send(self, cur: psycopg.Cursor[Any], sql: str, params: Sequence[Any]) -> None:
        """Where a statement leaves for the server (tests put a failure here)."""
        cur.execute(sql, params)

    def _commit(self, conn: psycopg.Connection[Any]) -> PgCursor:
        """COMMIT, keeping the transaction's id if its outcome cannot be known."""
        cur = conn.cursor()
        xid: str | None = None  # None: the transaction wrote nothing, or was never sent
        try:
            self._send(cur, "SELECT pg_current_xact_id_if_assigned()::text", ())
            row = cur.fetchone()
            xid = row[0] if row else None
            self._send(cur, "COMMIT", ())
        except psycopg.Error as exc:
            lost = self.lost()
            if lost and xid is not None:
                self.in_doubt = xid  # the COMMIT may have reached the server
            raise _as_sqlite_error(exc, lost) from exc
        return PgCursor(cur, None)

    def commit_verdict(self) -> bool | None:
        """Whether the transaction whose COMMIT got no answer committed;
        None when none is in doubt. Raises a storage failure while the server
        cannot tell yet (unreachable, or the cut-off session still finishing)."""
        xid = self.in_doubt
        if xid is None:
            return None
        conn = self._live("BEGIN")
        try:
            status = _xact_status(conn, xid)
            if status == "in progress" and self._end_lost_session(conn, xid):
                status = _xact_status(conn, xid)
        except psycopg.Error as exc:
            if exc.sqlstate == INVALID_PARAMETER_VALUE and not self.lost():
                # "transaction ID ... is in the future": the server restarted from a WAL
                # that never held the transaction, so its COMMIT was never made durable.
                self.in_doubt = None
                return False
            raise _as_sqlite_error(exc, self.lost()) from exc
        if status == "in progress":
            raise _as_sqlite_error(psycopg.OperationalError(f"transaction {xid} still running"))
        self.in_doubt = None
        if status not in ("committed", "aborted"):
            # Too old for the server to remember: no batch waits that long.
            raise sqlite3.OperationalError(f"the outcome of transaction {xid} is unknown")
        return bool(status == "committed")

    @staticmethod
    def _end_lost_session(conn: psycopg.Connection[Any], xid: str) -> bool:
        """End the session still running transaction `xid`; whether one was."""
        try:
            row = conn.execute(
                "SELECT bool_or(pg_terminate_backend(pid, %s)) FROM pg_stat_activity"
                " WHERE backend_xid::text = %s AND pid <> pg_backend_pid()",
                (ORPHAN_EXIT_MS, str(int(xid) % 2**32)),  # backend_xid: the id's low 32 bits
            ).fetchone()
        except psycopg.Error as exc:  # not allowed, or the server gone: still in doubt
            log.warning("could not end a lost session of this writer", error=str(exc))
            return False
        ended = bool(row and row[0])
        if ended:
            log.warning("ended a lost session of this writer", transaction=xid)
        return ended

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> PgCursor:
        statement = translate(sql)
        conn = self._live(sql)
        cur = conn.cursor()
        try:
            cur.executemany(statement.sql, [_params(p) for p in seq])
        except psycopg.Error as exc:
            raise _as_sqlite_error(exc, self._lost_after(exc)) from exc
        return PgCursor(cur, None)

    def executescript(self, sql: str) -> None:
        """Run a whole script (a migration) as it is, without placeholders."""
        conn = self._live("BEGIN")
        try:
            conn.execute(sql.encode())
        except psycopg.Error as exc:
            raise _as_sqlite_error(exc) from exc

    def close(self) -> None:
        self.full_text.snippets.close()
        if self._conn is not None:
            self._conn.close()
