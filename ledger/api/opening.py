"""Opening a ledger file for the library face: every refusal before any write.

The file is looked at read-only first: a path that is not a usable file, a file that
is not an SQLite database, a database that is not a ledger, a schema newer than this
code, or a file this user may not write is refused with an exception naming the file
and the problem, and the file is left as it was (not even switched to WAL mode). A
database is a ledger when its schema version says so and it holds the ledger's
tables: one at version 0 that holds any table is another program's, even when its
table names look like ours.

Then the writes are claimed (owner.py): a ledger a running daemon serves is refused
with an error naming the daemon's socket. Only then is it opened for writing and
migrated, as the daemon does (ledger/db.py). A missing file is created (its
directory must exist); an empty file counts as missing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from ledger.api.errors import NotALedger, SchemaTooNew
from ledger.api.owner import claim
from ledger.db import Synchronous, connect, damaged, is_damage, load_migrations, migrate
from ledger.foreign import SQLITE_HEADER, schema_of
from ledger.port import cipher as driver
from ledger.port.cipher import Key
from ledger.port.errors import LedgerError, LedgerNotWritable


def _not_writable(path: Path, what: str) -> LedgerNotWritable:
    return LedgerNotWritable(
        f"the ledger {path} cannot be opened for writing: {what} is not writable by uid"
        f" {os.getuid()} (check its owner and mode)"
    )


def _look(path: Path, key: Key | None = None) -> bool:
    """The read-only look, refusing what is no ledger: True when there is a ledger to
    open, False when one is to be made."""
    try:
        return _look_at(path, key)
    except PermissionError as exc:
        raise LedgerNotWritable(
            f"the ledger {path} cannot be reached by uid {os.getuid()}: {exc.strerror}"
            f" ({exc.filename}); check the modes of its directories"
        ) from None


def _look_at(path: Path, key: Key | None) -> bool:
    if path.is_dir():
        raise LedgerError(f"the ledger path {path} is a directory; give the path of a file")
    if not path.parent.is_dir():
        raise LedgerError(
            f"cannot open the ledger {path}: its directory {path.parent} does not exist"
        )
    if not path.exists() or path.stat().st_size == 0:
        if not os.access(path.parent, os.W_OK):
            raise _not_writable(path, f"its directory {path.parent}")
        return False
    try:
        with path.open("rb") as f:
            header = f.read(len(SQLITE_HEADER))
    except PermissionError:
        raise _not_writable(path, "the file (not even readable)") from None
    if header != SQLITE_HEADER and key is None:  # an encrypted file's header is not
        raise NotALedger(
            f"the file {path} is not a ledger: it is not an SQLite database (if it is an"
            " encrypted ledger, open it with its key_file)"
        )
    # Before looking inside: reading a WAL file creates its -shm, which needs the
    # same rights as writing.
    if not os.access(path, os.W_OK):
        raise _not_writable(path, "the file")
    if not os.access(path.parent, os.W_OK):
        raise _not_writable(path, f"its directory {path.parent}")
    _look_inside(path, key)
    return True


def _look_inside(path: Path, key: Key | None) -> None:
    latest = len(load_migrations())
    version = schema_of(path, key) or 0  # another program's database raises NotALedger
    if version > latest:
        raise SchemaTooNew(
            f"the ledger {path} has schema version {version}, newer than this agent-broker"
            f" knows ({latest}); upgrade agent-broker to open it. The file was not touched"
        )


def open_checked(
    path: Path, synchronous: Synchronous, key: Key | None = None
) -> Callable[[], None]:
    """Check, claim and migrate the ledger; returns what drops the claim."""
    _look(path, key)
    stack = ExitStack()
    stack.enter_context(claim(path))
    try:
        try:
            conn = connect(path, synchronous, key=key)
            try:
                migrate(conn)
            finally:
                conn.close()
        except driver.DatabaseError as exc:
            if is_damage(exc):
                raise damaged(path, [str(exc)]) from exc
            raise
    except BaseException:
        stack.close()
        raise
    return stack.close
