"""The writer when the storage fails (ledger/writer/group_commit.py): the failed batch
and every batch behind it run again, in order, until they commit; `failure`
says so meanwhile; a shutdown fails them instead; a failure that lasts ends
the writer with WriterStuck.

A real SQLite connection and the real `Transactor`; the link holds two
batches at once, as the writer process's does, so a batch handed over behind
a failing one is there to commit out of order if the executor let it. The
storage failure is a job raising the error SQLite raises on a full disk.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from ledger.port.errors import StorageFailed, WriterStuck
from ledger.writer.group_commit import LedgerWriter
from ledger.writer.jobs import JobSpec, Outcome, Pending
from ledger.writer.transactor import Transactor
from tests import ledger_db

pytestmark = pytest.mark.anyio


class Disk:
    """Whether writes fail, as a full disk makes them."""

    def __init__(self) -> None:
        self.full = False

    def check(self) -> None:
        if self.full:
            error = sqlite3.OperationalError("database or disk is full")
            error.sqlite_errorcode = sqlite3.SQLITE_FULL  # as SQLite sets it
            raise error


class PipelinedLink:
    """A `BatchLink` of depth 2 over a real Transactor, one batch at a time."""

    depth = 2

    def __init__(self, transactor: Transactor) -> None:
        self.transactor = transactor
        self._handed: deque[list[JobSpec]] = deque()
        self.sent = 0

    async def send(self, jobs: list[JobSpec]) -> None:
        self._handed.append(jobs)
        self.sent += 1

    async def receive(self) -> list[Outcome]:
        await anyio.sleep(0.01)  # a commit takes a while: the next batch is handed meanwhile
        return self.transactor.execute(self._handed.popleft())

    async def aclose(self) -> None:
        pass


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    c = ledger_db.connect(tmp_path / "ledger.db", isolation_level=None, check_same_thread=False)
    c.execute("PRAGMA journal_mode = WAL")
    c.execute("CREATE TABLE t (v TEXT)")
    return c


def written(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT v FROM t ORDER BY rowid")]


def insert(disk: Disk, value: str) -> Any:
    def job(c: sqlite3.Connection) -> str:
        c.execute("INSERT INTO t (v) VALUES (?)", (value,))
        disk.check()
        return value

    return job


async def until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(5):
        while True:
            if condition():
                return
            await anyio.sleep(0.001)


async def test_failed_writes_run_again_in_order_once_the_disk_has_room(
    conn: sqlite3.Connection,
) -> None:
    disk, link = Disk(), PipelinedLink(Transactor(conn))
    writer = LedgerWriter(link)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        disk.full = True
        first = writer.submit(insert(disk, "a"))
        await until(lambda: link.sent == 1)
        # Handed over while the first batch commits: it would commit first, but
        # the executor holds it back behind the batch that failed.
        behind = writer.submit(insert(Disk(), "b"))
        await until(lambda: link.sent == 2)
        await until(lambda: writer.failure is not None)
        assert writer.failure is not None and "disk is full" in writer.failure.error
        await anyio.sleep(0.5)  # a few back-offs: still failing, nothing resolved
        assert not first.done and not behind.done and written(conn) == []
        assert writer.failure is not None

        disk.full = False
        with anyio.fail_after(5):
            assert await first.result() == "a"
            assert await behind.result() == "b"
        assert writer.failure is None
        assert await writer.call(insert(disk, "c")) == "c"
        tg.cancel_scope.cancel()
    assert written(conn) == ["a", "b", "c"]


async def test_a_shutdown_fails_the_held_writes_instead_of_waiting(
    conn: sqlite3.Connection,
) -> None:
    disk, link = Disk(), PipelinedLink(Transactor(conn))
    writer = LedgerWriter(link)
    disk.full = True
    held: list[Pending[Any]] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            held.append(writer.submit(insert(disk, "a")))
            await until(lambda: writer.failure is not None)
            held.append(writer.submit(insert(disk, "b")))
            tg.cancel_scope.cancel()  # the writer stops: it retries no more
        for pending in held:
            with pytest.raises(StorageFailed):
                await pending.result()
    assert written(conn) == []


async def test_a_disk_that_stays_full_ends_the_writer(conn: sqlite3.Connection) -> None:
    disk, link = Disk(), PipelinedLink(Transactor(conn))
    writer = LedgerWriter(link, fail_exit_s=0.3)
    disk.full = True
    pending = writer.submit(insert(disk, "a"))
    before = anyio.current_time()
    with anyio.fail_after(5), pytest.raises(WriterStuck) as stuck:
        await writer.run()
    assert anyio.current_time() - before >= 0.3
    assert "could not write for 0.3 s" in str(stuck.value)
    with pytest.raises(WriterStuck):  # its caller is told; nothing waits for ever
        pending.get()
    assert written(conn) == []
