"""Who writes a ledger file: one owner at a time, told by a lock file beside it.

The daemon and an in-process Store each run their own single writer, so both must
never write one file at once (two writers would each take the other's head
compare-and-swap for a lost race, and the daemon's crash recovery would mistake
the Store's turns for its own). SQLite cannot tell: WAL mode lets any number of
connections write, one transaction after another.

The owner holds an exclusive `flock` on `<ledger>.lock` for as long as it writes, and
writes into the file who it is (pid, and the socket when it is a daemon); the kernel
drops the lock when the owner's process dies, even by kill -9, so a stale file never
blocks a restart. A claim that finds the lock held raises `LedgerInUse` naming the
holder's socket (a daemon) or pid (a Store), and changes nothing. The lock file is
opened close-on-exec and claimed after the daemon's writer process is started, so no
child keeps the lock after its parent is gone.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

from ledger.api.errors import LedgerInUse


def lock_path(ledger: Path | str) -> Path:
    return Path(f"{ledger}.lock")


def _holder_text(holder: dict[str, object], ledger: Path | str) -> LedgerInUse:
    socket = holder.get("socket")
    pid = holder.get("pid")
    pid_int = pid if isinstance(pid, int) else None
    if isinstance(socket, str) and socket:
        return LedgerInUse(
            f"the ledger {ledger} is served by a running daemon (pid {pid}) on the socket"
            f" {socket}; reach it through that socket (ledger.api.Store.connect), or stop"
            " the daemon first",
            socket=socket,
            pid=pid_int,
        )
    return LedgerInUse(
        f"the ledger {ledger} is open for writing in another process (pid {pid}, a Store);"
        " close it there first",
        pid=pid_int,
    )


def _read_holder(fd: int) -> dict[str, object]:
    raw = os.pread(fd, 4096, 0)
    try:
        value = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        value = {}
    return value if isinstance(value, dict) else {}


def holder(ledger: Path | str) -> LedgerInUse | None:
    """Who owns the ledger now, as the error a claim would raise; None if nobody."""
    try:
        fd = os.open(lock_path(ledger), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder_text(_read_holder(fd), ledger)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@contextmanager
def claim(ledger: Path | str, *, socket: str | None = None) -> Iterator[None]:
    """Own the ledger's writes until the block exits."""
    fd = os.open(lock_path(ledger), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _holder_text(_read_holder(fd), ledger) from None
        me = orjson.dumps({"pid": os.getpid(), "socket": socket})
        os.ftruncate(fd, 0)
        os.pwrite(fd, me, 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the last descriptor drops the flock
