"""The ledger writer in its own process: same contract as the thread writer."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from ledger.db import connect
from ledger.port.cipher import IntegrityError
from ledger.port.errors import LedgerWriteFailed, NotFound, WriterClosed, WriterDied
from ledger.sqlite.store import Ledger
from ledger.writer.group_commit import LedgerWriter
from ledger.writer.jobs import JobSpec, Pending
from ledger.writer.process import ProcessLink, RemoteJobError, UnpicklableJob
from plumbing import logs
from tests import ledger_db
from tests.harness import gone_within

pytestmark = pytest.mark.anyio


# Jobs are module-level functions: they travel to the writer process by pickle.
def _insert(c: sqlite3.Connection, v: str) -> int:
    return int(c.execute("INSERT INTO t (v) VALUES (?)", (v,)).lastrowid or 0)


def _insert_then_not_found(c: sqlite3.Connection) -> None:
    c.execute("INSERT INTO t (v) VALUES ('written-then-raised')")
    raise NotFound("no such thing", field="thing")


class _Odd(Exception):
    def __init__(self, a: int, b: int) -> None:  # pickle cannot rebuild it from args
        super().__init__(f"odd {a} {b}")


def _raise_odd(c: sqlite3.Connection) -> None:
    raise _Odd(1, 2)


def _pid(c: sqlite3.Connection) -> int:
    return os.getpid()


def _values(path: Path) -> list[str]:
    conn = ledger_db.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT v FROM t ORDER BY id")]
    finally:
        conn.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "w.db"
    conn = connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE)")
    conn.close()
    return path


@pytest.fixture
async def process(db: Path) -> AsyncIterator[ProcessLink]:
    link = ProcessLink.spawn(db, "NORMAL")
    await link.start()
    try:
        yield link
    finally:
        await link.aclose()


async def test_jobs_run_in_the_child_and_commit_in_groups(db: Path, process: ProcessLink) -> None:
    writer = LedgerWriter(process)
    results: dict[int, int] = {}

    async def one(i: int) -> None:
        results[i] = await writer.call(_insert, f"v{i}")

    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        assert await writer.call(_pid) == process.pid != os.getpid()
        async with anyio.create_task_group() as jobs:
            for i in range(300):
                jobs.start_soon(one, i)
        tg.cancel_scope.cancel()

    assert sorted(results) == list(range(300))
    assert len(set(results.values())) == 300
    assert sorted(_values(db)) == sorted(f"v{i}" for i in range(300))
    assert 1 <= writer.commits < 300


async def test_a_failing_job_fails_alone_with_its_own_error(db: Path, process: ProcessLink) -> None:
    writer = LedgerWriter(process)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        batch: list[Pending[Any]] = [
            writer.submit(_insert, "a"),
            writer.submit(_insert_then_not_found),
            writer.submit(_insert, "a"),  # the unique key refuses it
            writer.submit(lambda c: 1),  # a closure cannot be sent
            writer.submit(_raise_odd),  # an exception pickle cannot rebuild
            writer.submit(_insert, "b"),
        ]
        assert await batch[0].result() > 0
        with pytest.raises(NotFound) as not_found:
            await batch[1].result()
        assert not_found.value.field == "thing"  # attributes survive the trip
        with pytest.raises(IntegrityError):
            await batch[2].result()
        with pytest.raises(UnpicklableJob, match="module-level functions"):
            await batch[3].result()
        with pytest.raises(RemoteJobError, match="_Odd: odd 1 2"):
            await batch[4].result()
        assert await batch[5].result() > 0
        tg.cancel_scope.cancel()
    assert _values(db) == ["a", "b"]


async def test_a_cancelled_writer_finishes_every_handed_and_queued_batch(
    db: Path, process: ProcessLink
) -> None:
    writer = LedgerWriter(process, max_batch=7)  # batches in flight and still queued
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        pendings = [writer.submit(_insert, f"v{i}") for i in range(40)]
        await anyio.lowlevel.checkpoint()  # the sender hands the first batches over
        tg.cancel_scope.cancel()
    assert all(p.done for p in pendings)
    rowids = [p.get() for p in pendings]
    assert rowids == sorted(rowids)
    assert _values(db) == [f"v{i}" for i in range(40)]
    with pytest.raises(WriterClosed):
        writer.submit(_insert, "late")


def _slow_insert(c: sqlite3.Connection, v: str, seconds: float) -> int:
    time.sleep(seconds)
    return _insert(c, v)


async def test_the_next_batch_waits_at_the_child_while_one_commits(
    db: Path, process: ProcessLink
) -> None:
    writer = LedgerWriter(process)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        slow = writer.submit(_slow_insert, "slow", 0.3)
        await anyio.sleep(0.05)  # the slow batch is in the child
        second = writer.submit(_insert, "second")
        await anyio.sleep(0.05)  # handed over at once: the link has room for two
        assert writer.queued == 0
        later = [writer.submit(_insert, f"later{i}") for i in range(50)]
        await second.result()
        assert slow.done  # outcomes come back in order
        for p in later:
            await p.result()
        tg.cancel_scope.cancel()
    assert writer.commits == 3  # the fifty waited for room and went as one batch
    assert _values(db) == ["slow", "second", *(f"later{i}" for i in range(50))]


async def test_a_batch_that_cannot_be_sent_at_all_still_fails_alone(
    db: Path, process: ProcessLink
) -> None:
    writer = LedgerWriter(process)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        with pytest.raises(UnpicklableJob):
            await writer.call(lambda c: 1)
        assert await writer.call(_insert, "after") > 0
        tg.cancel_scope.cancel()
    assert _values(db) == ["after"]


async def test_the_child_ignores_the_signals_that_are_the_daemons(
    db: Path, process: ProcessLink
) -> None:
    writer = LedgerWriter(process)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        await writer.call(_insert, "before")
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            os.kill(process.pid, sig)
        await anyio.sleep(0.1)
        assert await writer.call(_insert, "after") > 0
        tg.cancel_scope.cancel()
    assert _values(db) == ["before", "after"]


async def test_a_dead_child_fails_every_job_and_stops_the_writer(
    db: Path, process: ProcessLink
) -> None:
    writer = LedgerWriter(process)
    writer_ended: list[BaseException] = []

    async def run() -> None:
        try:
            await writer.run()
        except WriterDied as exc:
            writer_ended.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await writer.call(_insert, "kept")
        os.kill(process.pid, signal.SIGKILL)
        await anyio.to_thread.run_sync(process.proc.wait)
        with pytest.raises(WriterDied) as died:
            await writer.call(_insert, "lost")
        assert isinstance(died.value, LedgerWriteFailed)  # callers see a failed write
    assert writer_ended, "the writer must stop (and with it the daemon)"
    with pytest.raises(WriterClosed):
        writer.submit(_insert, "later")
    assert _values(db) == ["kept"]


async def test_a_child_that_cannot_open_the_ledger_says_why(tmp_path: Path) -> None:
    link = ProcessLink.spawn(tmp_path / "missing" / "dir" / "w.db", "NORMAL")
    with pytest.raises(WriterDied, match="could not open the ledger"):
        await link.start()
    assert link.proc.poll() is not None


_PARENT = """
import sys, time
from pathlib import Path
import anyio
from ledger.writer.process import ProcessLink
t = ProcessLink.spawn(Path(sys.argv[1]), "NORMAL")
anyio.run(t.start)
print(t.pid, flush=True)
time.sleep(60)
"""


def test_the_child_dies_with_its_parent(db: Path) -> None:
    root = str(Path(__file__).resolve().parents[2])
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(db)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": root},
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert gone_within(child, 10), "the writer process outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


async def test_a_cancelled_receive_takes_nothing(db: Path, process: ProcessLink) -> None:
    """BatchLink: the writer does not shield `receive`, so cancelling it must lose nothing."""
    await process.send([JobSpec(_slow_insert, ("slow", 0.3), {})])
    await process.send([JobSpec(_insert, ("next",), {})])
    with anyio.move_on_after(0.05) as scope:
        await process.receive()  # the slow batch is still in the child
    assert scope.cancelled_caught
    with anyio.fail_after(10):
        assert await process.receive() == [(1, None)]  # the slow batch's outcome, not lost
        assert await process.receive() == [(2, None)]
    assert _values(db) == ["slow", "next"]


def _log_probe(c: sqlite3.Connection, text: str) -> None:
    logs.get("probe").warning(text)


async def test_a_reload_sets_the_log_level_of_the_writer_process(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The writer process logs at the level it was started with until the daemon tells
    it otherwise (`Ledger.configure_logging`, called on a reload)."""
    async with Ledger.open(tmp_path / "l.db", writer="process", log=("error", "json")) as ledger:
        await ledger.writer.call(_log_probe, "said at warning, below error")
        ledger.configure_logging("warning", "json")  # not waited for: the next job runs after it
        await ledger.writer.call(_log_probe, "said at warning, now shown")
    err = capfd.readouterr().err
    assert "now shown" in err
    assert "below error" not in err


async def test_the_writer_process_redacts_the_configured_secrets_and_patterns(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A channel token or engine key of the configuration, and an operator's
    `[logging] redact` pattern, never reach the writer process's log lines either."""
    async with Ledger.open(tmp_path / "l.db", writer="process", log=("warning", "json")) as ledger:
        ledger.configure_logging("warning", "json", ("tok-0123456789",), (r"case-\d{4}",))
        await ledger.writer.call(_log_probe, "token tok-0123456789 for case-1234, then sk-")
    err = capfd.readouterr().err
    assert "then sk-" in err, err  # the line was written
    assert "tok-0123456789" not in err and "case-1234" not in err, err
    assert err.count("[redacted]") == 2, err


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _block_until_reapable(pid: int) -> None:
    """Block, so that the event loop cannot notice first. WNOWAIT leaves the child to
    be reaped by the check; /proc's "Z" is not enough, since a zombie leader is not
    waitable while its other threads exit."""
    deadline = time.monotonic() + 5
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)


async def _until_state(pid: int, stopped: bool) -> None:
    with anyio.fail_after(5):
        while (_state(pid) in ("T", "t")) != stopped:  # noqa: ASYNC110 - polls the kernel
            await anyio.sleep(0.01)


async def _stop_continue_kill(path: Path) -> None:
    async with Ledger.open(path, writer="process") as ledger:
        assert ledger.writer_problems() == []
        pid = ledger.writer_pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        await _until_state(pid, stopped=True)
        assert ledger.writer_problems() == [
            "the ledger writer process is stopped (SIGSTOP or a debugger); writes wait"
        ]
        os.kill(pid, signal.SIGCONT)
        await _until_state(pid, stopped=False)
        assert ledger.writer_problems() == []
        os.kill(pid, signal.SIGKILL)
        _block_until_reapable(pid)
        assert ledger.writer.dead is None, "the writer task has not run since"
        assert ledger.writer_problems() == ["the ledger writer process was killed by SIGKILL"]
        await anyio.sleep(10)  # the ledger stops by itself at once (writer_process)


async def test_writer_problems_see_a_dead_process_before_the_writer_does(tmp_path: Path) -> None:
    """`health`'s check of the writer looks at the process itself on every call: stopped
    is a problem until it continues; killed, it is one before the event loop has run
    again; and then the ledger stops by itself."""
    with pytest.raises(BaseExceptionGroup) as stopped:
        await _stop_continue_kill(tmp_path / "l.db")
    assert stopped.group_contains(WriterDied, match="killed by SIGKILL")


async def test_writer_problems_name_a_batch_left_unanswered(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that runs but does not answer (a stuck disk, here a slow job) is stalled."""
    from ledger.writer import process as writer_process

    monkeypatch.setattr(writer_process, "STALLED_S", 0.2)
    # A ledger file (one with only table `t` is refused as not a ledger), plus `t`.
    path = db.parent / "ledger.db"
    async with Ledger.open(path, writer="thread"):
        pass
    conn = connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE)")
    conn.close()
    async with Ledger.open(path, writer="process") as ledger:
        slow = ledger.writer.submit(_slow_insert, "slow", 1.0)
        await anyio.sleep(0.5)
        problems = ledger.writer_problems()
        assert len(problems) == 1
        assert problems[0].startswith("the ledger writer process has not answered a batch for")
        assert await slow.result() > 0
        assert ledger.writer_problems() == []
