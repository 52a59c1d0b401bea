"""Sessions in and out of a ledger file, and a copy of the file: what `brokerctl`
export, import and backup run, beside a daemon that may be running.

An import is written through the ledger's own write path (a `Transactor`, as the
daemon's writer runs it): one transaction, BEGIN IMMEDIATE so it waits its turn
behind the daemon's writer, the full-text index brought up to date before COMMIT,
nothing written when any line is bad. An export reads one snapshot, so a thread that
grows meanwhile is exported as it was when the export began. A backup is SQLite's
online backup of a read-only connection, checked with `quick_check` before it is
reported good. An encrypted ledger is read with its key and backed up to a copy
encrypted with the same key: no step writes its contents in plain.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import orjson

from ledger.db import Synchronous, connect, open_keyed, readonly_uri
from ledger.port.cipher import Key
from ledger.sessions import export_lines, import_lines
from ledger.writer.jobs import JobSpec
from ledger.writer.transactor import open_transactor


def export_session(
    path: Path,
    synchronous: Synchronous,
    label: str,
    now: int,
    write: Callable[[bytes], object],
    key: Key | None = None,
) -> None:
    """Write the session's export, one JSON line at a time."""
    conn = connect(path, synchronous, readonly=True, key=key)
    try:
        conn.execute("BEGIN")
        for line in export_lines(conn, label, now):
            write(orjson.dumps(line) + b"\n")
    finally:
        conn.close()


def import_session(
    path: Path,
    synchronous: Synchronous,
    lines: list[bytes],
    label: str | None,
    now: int,
    key: Key | None = None,
) -> tuple[str, int]:
    """Read an export into a new session: its label and how many turns.

    `lines` is a list, not a stream: the writer runs a failed batch a second time
    to tell its jobs apart, and the second run must read the same lines.
    """
    transactor = open_transactor(path, synchronous, key)
    try:
        [(made, error)] = transactor.execute([JobSpec(import_lines, (lines, label, now), {})])
    finally:
        transactor.close()
    if error is not None:
        raise error
    label_made, turns = made
    return str(label_made), int(turns)


def backup(source: Path, target: Path, key: Key | None = None) -> list[str]:
    """Copy the ledger at `source` to `target` (encrypted with `key` when the ledger
    is); what `quick_check` found wrong."""
    if key is None:
        conn = sqlite3.connect(readonly_uri(source), uri=True)
        copy = sqlite3.connect(target)
    else:
        conn = open_keyed(source, readonly_uri(source), True, key, sqlite3.Connection)
        try:
            copy = open_keyed(target, str(target), False, key, sqlite3.Connection)
        except BaseException:
            conn.close()
            raise
    try:
        conn.backup(copy, pages=4096)
        return [r[0] for r in copy.execute("PRAGMA quick_check") if r[0] != "ok"]
    finally:
        copy.close()
        conn.close()
