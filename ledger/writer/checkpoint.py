"""WAL checkpoints beside the ledger writer, off its commit path.

By default SQLite checkpoints inside the COMMIT that takes the WAL past
`wal_autocheckpoint` pages, and with synchronous=NORMAL that checkpoint's sync is the
only one the WAL gets: the batch whose commit ran it, and every batch queued behind,
waited for all of it (docs/performance.md). So the writer's connection never
checkpoints (`wal_autocheckpoint = 0`), and a thread with a connection of its own
runs PASSIVE checkpoints, which copy committed frames into the database while the
writer goes on committing; a pass runs only after commits, at most every
`interval_s`, and the thread is stopped and joined before the writer's connection
closes.

SQLite starts the WAL over only when a write transaction begins with every frame
already copied, which under steady writes the background pass never catches. So once
the WAL holds `restart_frames`, the thread takes the writer's lock between two
transactions and copies the few frames written during its pass, and the next
transaction starts the WAL over, in place: `journal_size_limit` is `WAL_KEEP` times
the restart size, above the file's usual length, so the writer's commit path does not
truncate the file at every restart; only a WAL that grew far past it is trimmed.

A failing checkpoint (I/O error, disk full) fails no write: it is counted and kept as
`last_error`, the next pass tries again, and the WAL grows meanwhile, as it would if
SQLite's own checkpoints failed.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from ledger.db import open_file
from ledger.port import cipher as driver
from ledger.port.cipher import Key
from plumbing import logs

INTERVAL_S = 0.05
RESTART_FRAMES = 4096  # 16 MiB of 4 KiB pages
WAL_KEEP = 2  # the WAL file may stay this many times the restart size
WAL_HEADER = 32  # bytes at the start of the WAL file
FRAME_HEADER = 24  # bytes ahead of each page in it
CATCH_UP_FRAMES = 64  # few enough to copy under the writer's lock
CONVERGE_PASSES = 8
STOP_TIMEOUT_S = 30.0

log = logs.get("ledger.checkpoint")


class WalCheckpointer:
    def __init__(
        self,
        path: Path | str,
        *,
        interval_s: float = INTERVAL_S,
        restart_frames: int = RESTART_FRAMES,
        key: Key | None = None,
    ) -> None:
        self.path = str(path)
        self.interval_s = interval_s
        self.restart_frames = restart_frames
        # Held by the writer for each whole transaction, and by the thread for
        # the copy that lets the WAL start over.
        self.writing = threading.Lock()
        self.passes = 0
        self.restarts = 0  # catch-ups under the writer's lock
        self.failures = 0
        self.failing = 0  # failures since the last pass that worked
        self.last_error: str | None = None
        self._committed = threading.Event()
        self._stopping = threading.Event()
        self._conn = open_file(self.path, self.path, False, key, isolation_level=None)
        self._conn.execute("PRAGMA wal_autocheckpoint = 0")
        self._thread = threading.Thread(target=self._run, name="wal-checkpoint", daemon=True)

    def attach(self, writer: sqlite3.Connection) -> None:
        """Take checkpoints away from `writer` and bound its WAL file."""
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute(f"PRAGMA journal_size_limit = {self.wal_limit_bytes(writer)}")

    def wal_limit_bytes(self, conn: sqlite3.Connection) -> int:
        """The length past which a WAL that starts over is truncated."""
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        return WAL_KEEP * (WAL_HEADER + self.restart_frames * (page_size + FRAME_HEADER))

    def start(self) -> None:
        self._thread.start()

    def committed(self) -> None:
        """The writer committed: a pass is due (called by the writer, after COMMIT)."""
        if not self._committed.is_set():
            self._committed.set()

    def stop(self) -> None:
        self._stopping.set()
        self._committed.set()
        if self._thread.is_alive():
            self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            # A checkpoint still runs (a stalled disk): closing its connection under
            # it is not safe. The process is on its way out; it goes with it.
            log.error("WAL checkpoint did not stop in time; leaving it", ledger=self.path)
            return
        self._conn.close()

    def _run(self) -> None:
        while True:
            self._committed.wait()
            if self._stopping.is_set():
                return
            self._committed.clear()  # commits from here on are covered by this pass or the next
            self.run_pass()
            if self._stopping.wait(self.interval_s):
                return

    def run_pass(self) -> None:
        """One PASSIVE checkpoint; then, if the WAL is long, the catch-up to start over."""
        try:
            frames = self._checkpoint()
            if frames >= self.restart_frames:
                self._let_the_wal_restart(frames)
        except driver.Error as exc:
            self.failures += 1
            self.failing += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            if self.failing & (self.failing - 1) == 0:  # the 1st, 2nd, 4th, 8th... in a row
                log.error(
                    "WAL checkpoint failed; the WAL grows until one succeeds",
                    failures_in_a_row=self.failing,
                    error=self.last_error,
                    ledger=self.path,
                )
        else:
            if self.failing:
                log.warning("WAL checkpoints work again", after_failures=self.failing)
            self.failing = 0

    def _let_the_wal_restart(self, frames: int) -> None:
        # Each pass syncs and copies what was written during the one before,
        # so a few more make the copy under the lock short.
        for _ in range(CONVERGE_PASSES):
            before, frames = frames, self._checkpoint()
            if frames - before <= CATCH_UP_FRAMES:
                break
        with self.writing:
            self._checkpoint()
        self.restarts += 1

    def _checkpoint(self) -> int:
        """Copy what no reader still needs; return the frames in the WAL."""
        row = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.passes += 1
        return int(row[1])
