"""What every part of the SQLite `Ledger` runs on: its one writer and its readers.

A write is a job of a `ledger/` module queued on the one writer
(`ledger/writer/group_commit.py`), which commits it in a batch; a read runs one
function of a `ledger/` module on a reader connection, in a thread, so the event
loop never waits on SQLite, and what needs more than one query (an actor's start,
an export) is read in one hop. A reader never writes, and each reader connection is
used by one thread at a time.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

import anyio

from ledger.writer.group_commit import LedgerWriter

T = TypeVar("T")


class ReaderPool:
    """A fixed set of read connections, each used by one thread at a time."""

    def __init__(self, conns: list[sqlite3.Connection]) -> None:
        self._free = list(conns)
        self._all = list(conns)
        self._slots = anyio.Semaphore(len(conns))

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        async with self._slots:
            conn = self._free.pop()
            try:
                return await anyio.to_thread.run_sync(fn, conn)
            finally:
                self._free.append(conn)

    def close(self) -> None:
        for conn in self._all:
            conn.close()


class Connected:
    """The base of each part of `Ledger` (one per part of the port): the writer its
    writes are queued on and the readers its reads run on, both set by `Ledger`."""

    writer: LedgerWriter
    lease_writer: LedgerWriter  # session leases' renewals: `writer`, or one of their own
    readers: ReaderPool
