"""WAL checkpoints beside the ledger writer, off its commit path.

Why: by default SQLite checkpoints inside the COMMIT that takes the WAL past
`wal_autocheckpoint` pages (1,000). A checkpoint copies pages into the
database file and syncs both files; with synchronous=NORMAL that sync is the
only one the WAL ever gets, so it flushes everything written since the last
one. The batch whose commit ran it, and every batch queued behind, waited
for all of that. A turn writes about 40 frames, so at 250 messages/s that
was ten stalls a second, and the bulk of the p99 latency of bench.turns.

Rule 1: the writer's connection never checkpoints (`wal_autocheckpoint = 0`).
        A thread with a connection of its own runs PASSIVE checkpoints, which
        copy committed frames into the database while the writer goes on
        committing.
Rule 2: SQLite starts the WAL over from its beginning only when a write
        transaction begins with every frame already copied, and under steady
        writes the background pass never catches up with that moment. So
        once the WAL holds `restart_frames`, the thread takes the writer's
        lock between two transactions and copies the few frames written during
        its pass; the next transaction then starts the WAL over.
Rule 3: a pass runs only after commits, at most every `interval_s`. The
        thread is stopped and joined before the writer's connection closes.
Rule 4: a failing checkpoint (I/O error, disk full) fails no write. It is
        counted and kept as `last_error`, and the next pass tries again; the
        WAL grows meanwhile, as it would if SQLite's own checkpoints failed.
Rule 5: a WAL that starts over is written over in place, not cut short. The
        first commit after a restart truncates the file to `journal_size_limit`
        when it is longer, and under steady writes it always was: the restart
        comes a little past `restart_frames`. That ftruncate ran in the
        writer's commit path and took 0.9-3.4 ms, 1.6 on average (ext4;
        bench.turns at 1,000 messages/s, 3.7 restarts a second). So the limit
        is `WAL_KEEP` times the restart size, above the file's usual length: it
        trims only a WAL that grew far past it (a reader that held an old
        snapshot, failing checkpoints).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from plumbing import logs

INTERVAL_S = 0.05
RESTART_FRAMES = 4096  # 16 MiB of 4 KiB pages
WAL_KEEP = 2  # the WAL file may stay this many times the restart size (Rule 5)
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
    ) -> None:
        self.path = str(path)
        self.interval_s = interval_s
        self.restart_frames = restart_frames
        # Held by the writer for each whole transaction, and by the thread for
        # the copy that lets the WAL start over (Rule 2).
        self.writing = threading.Lock()
        self.passes = 0
        self.restarts = 0  # catch-ups under the writer's lock
        self.failures = 0
        self.failing = 0  # failures since the last pass that worked
        self.last_error: str | None = None
        self._committed = threading.Event()
        self._stopping = threading.Event()
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA wal_autocheckpoint = 0")
        self._thread = threading.Thread(target=self._run, name="wal-checkpoint", daemon=True)

    def attach(self, writer: sqlite3.Connection) -> None:
        """Take checkpoints away from `writer` (Rule 1) and bound its WAL file (Rules 2, 5)."""
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute(f"PRAGMA journal_size_limit = {self.wal_limit_bytes(writer)}")

    def wal_limit_bytes(self, conn: sqlite3.Connection) -> int:
        """The length past which a WAL that starts over is truncated (Rule 5)."""
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
        """One PASSIVE checkpoint; then, if the WAL is long, the catch-up of Rule 2."""
        try:
            frames = self._checkpoint()
            if frames >= self.restart_frames:
                self._let_the_wal_restart(frames)
        except sqlite3.Error as exc:
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
