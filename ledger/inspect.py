"""The ledger file looked at from outside: what `brokerctl doctor` reports, with
the daemon up or down, and what an error of the storage means to an operator.

A look never writes: the file is opened read-only, and a file that does not exist is
reported as such, never created. Every problem is part of the report, never an
exception: damage (the integrity check's findings, or an error that means damage) is
told apart from a file that cannot be read at all. What the report says past the
damage is filled in only when there is none, as a damaged file's other figures
cannot be trusted.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Literal

from ledger.db import (
    integrity_check,
    is_damage,
    load_migrations,
    open_file,
    readonly_uri,
    schema_version,
)
from ledger.port import cipher as driver
from ledger.port.cipher import Key
from ledger.port.errors import LedgerError
from ledger.port.records import LedgerReport
from ledger.queries import open_item_count

FailureKind = Literal["permission", "io", "damage", "cannot_open"]


def report(conn: sqlite3.Connection, stuck_before: int) -> LedgerReport:
    """Integrity, schema, turns running since before `stuck_before` and replies
    unconfirmed since then."""
    problems = integrity_check(conn)
    if problems:
        return LedgerReport(damage=problems)
    return activity(conn, stuck_before, schema_version(conn), len(load_migrations()))


def activity(conn: sqlite3.Connection, stuck_before: int, schema: int, latest: int) -> LedgerReport:
    """The report's part any engine answers alike: the schema, stuck turns and replies."""
    running = conn.execute(
        "SELECT session_label, min(updated_at) FROM queue_items WHERE status = 'running'"
        " AND updated_at < ? GROUP BY session_label ORDER BY session_label",
        (stuck_before,),
    ).fetchall()
    pending = conn.execute(
        "SELECT channel, count(*) FROM outbox WHERE status = 'pending' AND created_at < ?"
        " GROUP BY channel ORDER BY channel",  # in order on every engine, not a hash's
        (stuck_before,),
    ).fetchall()
    return LedgerReport(
        schema=schema,
        latest=latest,
        running_since=[(str(label), int(since)) for label, since in running],
        unconfirmed=[(str(channel), int(n)) for channel, n in pending],
    )


def _read_only(path: Path, key: Key | None) -> sqlite3.Connection:
    return open_file(path, readonly_uri(path), True, key)


def inspect_file(path: Path, stuck_before: int, key: Key | None = None) -> LedgerReport:
    """`report` on the file at `path` (opened with `key` if encrypted), whoever else
    has it open."""
    try:
        conn = _read_only(path, key)
        try:
            return report(conn, stuck_before)
        finally:
            conn.close()
    except LedgerError as exc:  # a wrong key, or a key for a plain file
        return LedgerReport(unreadable=str(exc))
    except driver.Error as exc:
        if is_damage(exc) and key is None and path.exists() and not driver.is_plain(path):
            hint = "if it is an encrypted ledger, set [ledger] key_file"
            return LedgerReport(damage=[f"{exc}; {hint}"])
        if is_damage(exc):
            return LedgerReport(damage=[str(exc)])
        return LedgerReport(unreadable=str(exc))


def waiting_items(path: Path, key: Key | None = None) -> int | None:
    """Queued or running items in the file at `path`; None when it cannot be read."""
    try:
        conn = _read_only(path, key)
        try:
            return open_item_count(conn)
        finally:
            conn.close()
    except LedgerError:
        return None
    except driver.Error:
        return None


_KINDS: dict[int, FailureKind] = {
    3: "permission",  # SQLITE_PERM
    8: "permission",  # SQLITE_READONLY
    10: "io",  # SQLITE_IOERR
    11: "damage",  # SQLITE_CORRUPT
    13: "io",  # SQLITE_FULL
    14: "cannot_open",  # SQLITE_CANTOPEN
    26: "damage",  # SQLITE_NOTADB
}


def storage_failure(exc: BaseException) -> FailureKind | None:
    """What an error raised by the storage means (for the daemon's exit status); None
    for an error that does not come from it."""
    if not isinstance(exc, driver.Error):
        return None
    return _KINDS.get(getattr(exc, "sqlite_errorcode", 0) & 0xFF, "io")
