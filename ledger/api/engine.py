"""One open ledger file in this process: its writer thread, its read connections and
its claim on the file (owner.py). Every Store of the process on that file shares it.

One thread owns the write connection (a `Transactor`, as the daemon's writer thread
runs it: a failing job rolled back alone, the full-text index brought up to date,
WAL checkpoints beside). It takes every job waiting when it wakes as one transaction
(group commit, at most MAX_BATCH) and tells each caller only after the COMMIT. A
storage failure (disk full, I/O error) fails the jobs of its batch, nothing of which
was kept, and the next batch starts with `resume_writes`; a library caller gets the
error and decides, as there is no daemon to retry for it. Closing stops taking jobs,
finishes every job already taken, then closes the connections and drops the claim;
the last Store of a file closes its engine.

Reads run on the caller's own thread, on a connection of that thread: a hop to
another thread costs more than a short read from the page cache, and WAL readers
never wait for the writer. With synchronous=NORMAL a COMMIT syncs nothing (the
checkpoints that sync run on their own thread: checkpoint.py), so the appends an
event loop's tasks make in one pass of the loop are gathered and run as one
transaction on that loop's own thread, led by the pass's first task (waiting.py);
at most MAX_BATCH of them, the rest go to the writer thread. That happens only when
the writer is free: with a batch of the writer thread under way or waiting, or a
checkpoint holding the write lock, the gathered appends join its queue instead, so
the loop never waits for someone else's transaction. With FULL each COMMIT syncs, and
that wait stays off the loop. A blocking caller (sync.py) runs its job on its own
thread the same way, at any setting. A loop whose last batches each held one append
commits the next at once, without the pass, but every ALONE_PASSES-th such append
lets the pass run all the same, so the loop's other tasks and its I/O wait at most
that many appends (docs/performance.md).

The full-text index (ledger/fts.py) is brought up to date once FTS_LAG messages wait
for it, and at close, not at every COMMIT, as FTS5 writes a segment per transaction
(docs/performance.md). The index stays whole up to `fts_progress.indexed_through`
and holds nothing beyond it, so whoever writes next (a daemon, another Store)
indexes what a Store left waiting; nothing in the library searches it meanwhile (the
daemon's recall runs only where it owns the file). Whether FTS_LAG messages wait is
asked of the file only when the connection's `total_changes` (which grows by at least
one for every message written) says that many may have come, and at the next COMMIT
after a rollback, which may undo an indexing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledger.api.errors import StoreClosed
from ledger.api.opening import open_checked
from ledger.api.waiting import Ticket, run_now
from ledger.db import Synchronous, connect
from ledger.forgotten import shadow
from ledger.fts import index_new_messages
from ledger.ingest import WriterCaches, WriterConnection
from ledger.port.cipher import Key
from ledger.port.errors import StorageFailed, WriterDied
from ledger.writer.checkpoint import WalCheckpointer
from ledger.writer.jobs import JobSpec, resume_writes
from ledger.writer.transactor import Transactor

MAX_BATCH = 512  # jobs a transaction: bounds one commit's time, not the throughput
FTS_LAG = 256  # messages the full-text index may lag behind
ALONE_PASSES = 16  # single-append batches in a row, one of which lets the pass run


class IndexWhenDue:
    """`index_new_messages` once FTS_LAG messages wait for it, asking the
    file how many wait only when they may be that many."""

    def __init__(self) -> None:
        self._changes = -FTS_LAG  # the connection's total_changes when it was last asked
        self._waiting = 0  # the messages that waited then

    def __call__(self, conn: sqlite3.Connection) -> int:
        changes = conn.total_changes  # a C int: below the last answer once it wraps
        if self._changes <= changes < self._changes + FTS_LAG - self._waiting:
            return 0
        waiting = conn.execute(
            "SELECT coalesce((SELECT max(id) FROM messages), 0) - indexed_through FROM fts_progress"
        ).fetchone()[0]
        indexed = index_new_messages(conn) if waiting >= FTS_LAG else 0
        self._changes, self._waiting = conn.total_changes, 0 if indexed else waiting
        return indexed

    def forget(self) -> None:
        """A transaction rolled back, maybe with the index it brought up to date: ask
        the file next time."""
        self._changes, self._waiting = -FTS_LAG, 0


def open_library_transactor(
    path: Path, synchronous: Synchronous, key: Key | None = None
) -> tuple[Transactor, threading.Lock]:
    """The daemon's write connection (transactor.open_transactor), indexing lazily,
    and the lock its checkpointer holds while it catches up (checkpoint.py)."""
    conn = connect(path, synchronous, factory=WriterConnection, key=key)
    assert isinstance(conn, WriterCaches)
    indexer = IndexWhenDue()

    def rolled_back() -> None:
        conn.forget()
        indexer.forget()

    checkpointer = None
    try:
        checkpointer = WalCheckpointer(path, key=key)
        transactor = Transactor(conn, rolled_back, indexer, checkpointer)
        return transactor, checkpointer.writing
    except BaseException:
        if checkpointer is not None:
            checkpointer.stop()
        conn.close()
        raise


class WriterThread:
    def __init__(self, transactor: Transactor, checkpoint_lock: threading.Lock, name: str) -> None:
        self._transactor = transactor
        self._checkpoint_lock = checkpoint_lock  # held while a checkpoint catches up
        self._cond = threading.Condition()
        self._queue: deque[Ticket] = deque()
        self._closing = False
        self._resume = False  # after a storage failure, the next batch resumes writes
        self._busy = threading.Lock()  # one transaction at a time, on any thread
        self.batches = 0
        self.jobs = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, ticket: Ticket) -> None:
        with self._cond:
            if self._closing:
                raise StoreClosed("the Store is closed; open it again to go on")
            self._queue.append(ticket)
            if len(self._queue) == 1:
                self._cond.notify()

    def _take(self) -> list[Ticket]:
        with self._cond:
            while not self._queue and not self._closing:
                self._cond.wait()  # woken by submit or close
            n = min(len(self._queue), MAX_BATCH)
            return [self._queue.popleft() for _ in range(n)]

    def _run(self) -> None:
        batch: list[Ticket] = []
        try:
            while batch := self._take():
                self._execute(batch)
        except Exception as exc:
            # A failure of this code, not of a job: nobody may wait forever on it.
            died = WriterDied(f"the Store's writer thread failed: {exc!r}")
            died.__cause__ = exc  # the callers see the traceback; the thread ends quietly
            with self._cond:
                self._closing = True
                left, batch = [*batch, *self._queue], []
                self._queue.clear()
            for ticket in left:
                ticket.value, ticket.error = None, died
            self._deliver(left)
        finally:
            # After a transaction another thread may still be running.
            with self._busy:
                # what the index still lacks, in a transaction of its own;
                # if that fails too, whoever writes next indexes it.
                with contextlib.suppress(Exception):
                    self._transactor.execute([JobSpec(index_new_messages, (), {})])
                self._transactor.close()

    def run_here(self, batch: list[Ticket]) -> bool:
        """Commit `batch` on this thread if the writer is free; False if not,
        and then nothing was run. The caller is told through each ticket's `on_done`."""
        if not self._busy.acquire(blocking=False):
            return False
        assert len(batch) <= MAX_BATCH
        try:
            # Read without the condition's lock: a job queued just after this look
            # would find the writer busy all the same, and `_closing` is only set once.
            if self._queue or self._closing or self._checkpoint_lock.locked():
                return False
            self._execute_unlocked(batch, _notify)
        except Exception as exc:
            # A failure of this code, not of a job: as in _run, its callers are told
            # and the Store takes no more jobs (what is queued fails in _run).
            died = WriterDied(f"the Store's commit failed: {exc!r}")
            died.__cause__ = exc
            with self._cond:
                self._closing = True
                self._cond.notify()
            for ticket in batch:
                ticket.value, ticket.error = None, died
            _notify(batch)
        finally:
            self._busy.release()
        return True

    def _execute(self, batch: list[Ticket]) -> None:
        with self._busy:
            self._execute_unlocked(batch, self._deliver)

    def _execute_unlocked(
        self, batch: list[Ticket], deliver: Callable[[list[Ticket]], None]
    ) -> None:
        jobs = [t.job for t in batch]
        if self._resume:
            jobs.insert(0, JobSpec(resume_writes, (), {}))
            outcomes = self._transactor.execute(jobs)[1:]
            self._resume = False
        else:
            outcomes = self._transactor.execute(jobs)
        self.batches += 1
        self.jobs += len(batch)
        for ticket, (value, error) in zip(batch, outcomes, strict=True):
            ticket.value, ticket.error = value, error
            if error is not None and isinstance(error, StorageFailed):
                self._resume = True
        deliver(batch)

    @staticmethod
    def _deliver(batch: list[Ticket]) -> None:
        by_side: dict[Any, list[Ticket]] = {}
        for ticket in batch:
            by_side.setdefault(ticket.post, []).append(ticket)
        for post, tickets in by_side.items():
            # RuntimeError: that event loop is gone, and its waiters with it.
            with contextlib.suppress(RuntimeError):
                post(functools.partial(_notify, tickets))

    @property
    def closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()


def _notify(tickets: list[Ticket]) -> None:
    for ticket in tickets:
        ticket.done = True  # on the caller's side, as on_done (waiting.py)
        ticket.on_done(ticket)


class Readers:
    """A read connection per calling thread."""

    def __init__(self, path: Path, synchronous: Synchronous, key: Key | None = None) -> None:
        self._path = path
        self._synchronous = synchronous
        self._key = key
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = shadow(connect(self._path, self._synchronous, readonly=True, key=self._key))
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()


class Engine:
    def __init__(self, path: Path, synchronous: Synchronous, cipher_key: Key | None = None) -> None:
        self.path = path
        self.synchronous = synchronous
        self.cipher_key = cipher_key  # an encrypted ledger's: every connection uses it
        self.refs = 0
        self._release = open_checked(path, synchronous, cipher_key)  # checks, claims, migrates
        try:
            transactor, checkpoint_lock = open_library_transactor(path, synchronous, cipher_key)
        except BaseException:
            self._release()
            raise
        self.writer = WriterThread(transactor, checkpoint_lock, f"ledger-store-writer:{path.name}")
        self.gather_on_loop = synchronous == "NORMAL"  # a COMMIT that syncs nothing
        self._gathered: dict[object, list[Ticket]] = {}  # by event loop, until its callback
        # single-append batches in a row on the loop of this id (an id, not
        # the loop, so that a loop that is gone is not kept alive by it).
        self._alone_loop = 0
        self._alone = 0
        self.readers = Readers(path, synchronous, cipher_key)

    def submit(self, ticket: Ticket) -> None:
        if ticket.post is run_now:
            self.run_blocking(ticket)
            return
        loop = ticket.loop
        if loop is None or not self.gather_on_loop:
            self.writer.submit(ticket)
            return
        if self.writer.closing:
            raise StoreClosed("the Store is closed; open it again to go on")
        gathered = self._gathered.get(loop)
        if gathered is None:
            # Only this loop's thread touches its entry; the dict itself is shared.
            self._gathered[loop] = [ticket]
            ticket.lead = self._commit_gathered  # this task commits the pass (waiting.py)
            alone = self._alone if id(loop) == self._alone_loop else 0
            ticket.gather = alone % ALONE_PASSES == 0  # now and then, the pass runs
            return
        gathered.append(ticket)

    def _commit_gathered(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._gathered.pop(loop)
        if len(batch) > 1:  # not alone: gather again
            self._alone = 0
        elif id(loop) == self._alone_loop:
            self._alone += 1
        else:
            self._alone_loop, self._alone = id(loop), 1
        # One transaction at most on the loop's thread: it holds up the loop's other
        # tasks for as long as it runs; whatever is gathered beyond goes to the writer.
        if len(batch) <= MAX_BATCH:
            if self.writer.run_here(batch):
                return
        elif self.writer.run_here(batch[:MAX_BATCH]):
            batch = batch[MAX_BATCH:]
        for n, ticket in enumerate(batch):
            try:
                self.writer.submit(ticket)
            except StoreClosed as exc:  # closed since they were gathered: none of these ran
                for late in batch[n:]:
                    late.value, late.error = None, exc
                _notify(batch[n:])
                return

    def run_blocking(self, ticket: Ticket) -> None:
        """A blocking caller's job, on its own thread when the writer is free."""
        if not self.writer.run_here([ticket]):
            self.writer.submit(ticket)

    def close(self) -> None:
        try:
            # Readers first: the last connection to close checkpoints the WAL and
            # removes it, which a read-only one cannot.
            self.readers.close()
            self.writer.close()
        finally:
            self._release()


_engines: dict[Path, Engine] = {}
_engines_lock = threading.Lock()


def acquire(path: Path, synchronous: Synchronous, cipher_key: Key | None = None) -> Engine:
    """The engine of `path` in this process, opened on first use (blocking)."""
    if synchronous not in ("NORMAL", "FULL"):  # SQLite takes OFF, and ignores a typo
        raise ValueError(f"synchronous={synchronous!r}: a ledger is opened with 'NORMAL' or 'FULL'")
    key = path.resolve()
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = Engine(key, synchronous, cipher_key)
            _engines[key] = engine
        elif engine.cipher_key != cipher_key:
            raise ValueError(
                f"the ledger {path} is open in this process with another key (or none);"
                " open it with the same key_file"
            )
        elif engine.synchronous != synchronous:
            raise ValueError(
                f"the ledger {path} is open in this process with synchronous ="
                f" {engine.synchronous}; open it with the same setting"
            )
        engine.refs += 1
        return engine


def release(engine: Engine) -> None:
    with _engines_lock:
        engine.refs -= 1
        if engine.refs > 0:
            return
        _engines.pop(engine.path, None)
    engine.close()
