"""Sessions in and out of a ledger file, and a copy of the file: what `brokerctl`
export, import and backup run, beside a daemon that may be running.

An import is written through the ledger's own write path (a `Transactor`, as the
daemon's writer runs it): one transaction, BEGIN IMMEDIATE so it waits its turn
behind the daemon's writer, the full-text index brought up to date before COMMIT,
nothing written when any line is bad. An export reads one snapshot, so a thread that
grows meanwhile is exported as it was when the export began. A backup is SQLite's
online backup of a read-only connection, checked with `quick_check` before it is
reported good. An encrypted ledger is read with its key and backed up to a copy
encrypted with the same key: no step writes its contents in plain. Encrypting a
plain ledger in place and changing the key take the ledger's owner lock, so they
refuse while a daemon or a Store writes it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import orjson

from ledger.api.owner import claim
from ledger.db import Synchronous, connect, open_file, open_keyed, readonly_uri
from ledger.forgotten import shadow
from ledger.port.cipher import Key, driver, is_plain
from ledger.port.errors import LedgerError
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
    conn = shadow(connect(path, synchronous, readonly=True, key=key))
    try:
        conn.execute("BEGIN")
        for line in export_lines(conn, label, now, with_audit=True):
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
    conn = open_file(source, readonly_uri(source), True, key)
    try:
        copy = open_file(target, str(target), False, key)
    except BaseException:
        conn.close()
        raise
    try:
        conn.backup(copy, pages=4096)
        return [r[0] for r in copy.execute("PRAGMA quick_check") if r[0] != "ok"]
    finally:
        copy.close()
        conn.close()


def encrypt_in_place(path: Path, key: Key) -> None:
    """Turn the plain ledger at `path` into one encrypted with `key`, in place.

    The ledger must be owned by nobody (the daemon stopped, no Store open). Its WAL is
    checkpointed into the file, then `sqlcipher_export` writes an encrypted copy
    beside it (encrypted from its first page, its journal too), which is synced and
    renamed over the plain file; the plain file's bytes are then overwritten through
    a descriptor kept open on it, and its -wal and -shm files removed. A crash before
    the rename leaves the plain ledger as it was (and a partial copy that the next
    run removes); after it, the encrypted ledger.
    """
    with claim(path):  # LedgerInUse while a daemon or a Store writes it
        if not is_plain(path):
            raise LedgerError(f"the ledger {path} is not a plain SQLite file (already encrypted?)")
        target = Path(f"{path}.encrypting")
        for leftover in (target, Path(f"{target}-journal")):
            leftover.unlink(missing_ok=True)
        conn = driver().connect(str(path), isolation_level=None)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            conn.execute(f"ATTACH DATABASE ? AS encrypted KEY {key.pragma_value()}", (str(target),))
            conn.execute("SELECT sqlcipher_export('encrypted')")
            conn.execute(f"PRAGMA encrypted.user_version = {version}")
            conn.execute("DETACH DATABASE encrypted")
        finally:
            conn.close()
        _sync(target)
        plain = os.open(path, os.O_RDWR)
        try:
            os.replace(target, path)
            _sync(path.parent)
            _overwrite(plain)
        finally:
            os.close(plain)
        for side in ("-wal", "-shm"):
            Path(f"{path}{side}").unlink(missing_ok=True)
        _sync(path.parent)


def rekey(path: Path, old: Key, new: Key) -> None:
    """Encrypt the ledger at `path` with `new` instead of `old` (`PRAGMA rekey`),
    its WAL checkpointed first so no page stays under the old key."""
    with claim(path):
        conn = open_keyed(path, str(path), False, old, sqlite3.Connection)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute(f"PRAGMA rekey = {new.pragma_value()}")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _overwrite(fd: int, chunk: int = 1 << 20) -> None:
    """Zero the whole file behind `fd` and sync it."""
    size = os.fstat(fd).st_size
    zeros = bytes(chunk)
    for offset in range(0, size, chunk):
        os.pwrite(fd, zeros[: min(chunk, size - offset)], offset)
    os.fsync(fd)
