"""The ledger's key, and the SQLite driver that opens an encrypted ledger.

A key file belongs to the daemon's user and is readable by no one else (mode 0600
or 0400); its content, less one trailing newline, is the key: 64 hex digits are a
raw 256-bit key, anything else a passphrase of at least 16 characters. A key file
that breaks any of this is refused, naming the file, before anything opens.

The key travels as a `Key`, whose text never appears in its repr, so a log line or
a traceback that shows one shows no secret. An encrypted ledger is opened through
SQLCipher (the `sqlcipher3` binding of the `encryption` extra), whose connections
and exceptions are classes of their own: code that catches a driver's error or
checks for a connection uses the tuples here, which hold both drivers' classes.

A plain ledger is opened by the driver whose SQLite removes a deleted row's terms
from the full-text index as it goes (FTS5's secure-delete, SQLite 3.42 and later):
the standard library's when it is new enough, else SQLCipher's, which without a key
is plain SQLite. Where neither is, the standard library's older SQLite serves, and
the ledger keeps the index clean by merging it instead (ledger/erasure.py).
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, cast

try:
    from sqlcipher3 import dbapi2 as _cipher
except ImportError:  # the `encryption` extra is not installed
    _cipher = None

INSTALL = "pip install 'agent-broker[encryption]'"
SECURE_DELETE = (3, 42, 0)  # the first SQLite whose FTS5 has secure-delete
DRIVER_ENV = "BROKER_SQLITE_DRIVER"  # "stdlib" or "sqlcipher3": one driver, forced
MIN_PASSPHRASE = 16
_RAW = re.compile(r"[0-9a-fA-F]{64}")


def _both(name: str) -> tuple[Any, ...]:
    ours = getattr(sqlite3, name)
    return (ours,) if _cipher is None else (ours, getattr(_cipher, name))


Error: tuple[type[sqlite3.Error], ...] = _both("Error")
DatabaseError: tuple[type[sqlite3.DatabaseError], ...] = _both("DatabaseError")
IntegrityError: tuple[type[sqlite3.IntegrityError], ...] = _both("IntegrityError")
OperationalError: tuple[type[sqlite3.OperationalError], ...] = _both("OperationalError")
InterfaceError: tuple[type[sqlite3.InterfaceError], ...] = _both("InterfaceError")
ProgrammingError: tuple[type[sqlite3.ProgrammingError], ...] = _both("ProgrammingError")
Connection: tuple[type[sqlite3.Connection], ...] = _both("Connection")


class KeyFileError(ValueError):
    """The key file is missing, unreadable, badly owned or moded, or holds no usable key."""


@dataclass(frozen=True, slots=True)
class Key:
    """A ledger key: `secret` is 64 hex digits (raw) or a passphrase."""

    secret: str = field(repr=False)

    @property
    def raw(self) -> bool:
        return _RAW.fullmatch(self.secret) is not None

    def pragma_value(self) -> str:
        """The value of `PRAGMA key = ...` (and of `rekey`, `ATTACH ... KEY`)."""
        if self.raw:
            return f"\"x'{self.secret.lower()}'\""
        return "'" + self.secret.replace("'", "''") + "'"


def driver() -> ModuleType:
    """The SQLCipher driver module; a KeyFileError naming the install when it is absent."""
    if _cipher is None:
        raise KeyFileError(f"an encrypted ledger needs SQLCipher: {INSTALL}")
    return cast(ModuleType, _cipher)


def plain_driver() -> ModuleType:
    """The driver that opens a plain ledger: the first of the standard library's and
    SQLCipher's whose SQLite has FTS5 secure-delete, else the standard library's.
    `BROKER_SQLITE_DRIVER` forces one (benchmarks compare them)."""
    forced = os.environ.get(DRIVER_ENV, "")
    if forced == "sqlcipher3":
        return driver()
    if forced not in ("", "stdlib"):
        raise ValueError(f"{DRIVER_ENV}={forced!r}: it is 'stdlib' or 'sqlcipher3'")
    if forced or _cipher is None or sqlite3.sqlite_version_info >= SECURE_DELETE:
        return sqlite3
    return cast(ModuleType, _cipher)


def secure_delete_in(module: ModuleType) -> bool:
    """Whether the SQLite of the driver `module` has FTS5 secure-delete."""
    return tuple(module.sqlite_version_info) >= SECURE_DELETE


def read_key(path: Path | str) -> Key:
    """The key in `path`, after checking the file's owner and mode."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise KeyFileError(f"cannot read key file {path}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"key file {path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise KeyFileError(
                f"key file {path} is owned by uid {st.st_uid}, not by the daemon's user"
                f" (uid {os.geteuid()})"
            )
        mode = stat.S_IMODE(st.st_mode)
        if mode not in (0o600, 0o400):
            raise KeyFileError(
                f"key file {path} has mode {mode:04o}; it must be 0600 or 0400 (chmod 600 {path})"
            )
        data = os.read(fd, 65536)
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KeyFileError(f"key file {path} is not UTF-8 text") from exc
    text = text.removesuffix("\n")
    if not text:
        raise KeyFileError(f"key file {path} is empty")
    if _RAW.fullmatch(text) is None and len(text) < MIN_PASSPHRASE:
        raise KeyFileError(
            f"key file {path} holds neither 64 hex digits nor a passphrase of at least"
            f" {MIN_PASSPHRASE} characters"
        )
    return Key(text)


PLAIN_HEADER = b"SQLite format 3\x00"


def is_plain(path: Path | str) -> bool:
    """Whether `path` starts as a plain (unencrypted) SQLite file does."""
    try:
        with open(path, "rb") as f:
            return f.read(len(PLAIN_HEADER)) == PLAIN_HEADER
    except OSError:
        return False
