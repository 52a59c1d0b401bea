"""What a reader's statement pays to ask whether an erasure is running, by how many
erasures the ledger has finished.

    .venv/bin/python -m bench.erasures_scan [--finished 10000] [--reads 20000]

A reader connection has the views of ledger/forgotten.py, whose conditions ask at
every statement whether an erasure is running. Builds a ledger with `--finished`
finished erasures and a few turns, then times `--reads` point reads of a turn
through the views, with the index of running erasures and without it (dropped),
interleaved in rounds. Prints the µs a read, median of the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from ledger.db import connect, migrate
from ledger.forgotten import shadow

ROUNDS = 5


def build(path: Path, finished: int) -> None:
    conn = connect(path)
    migrate(conn)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO erasures (entity_id, step, counts, started_at, finished_at)"
        " VALUES (?, 8, ?, 1, 2)",
        [(f"ent_{i:010d}", json.dumps({"sessions": 1})) for i in range(finished)],
    )
    conn.executemany(
        "INSERT INTO turns (id, session_label, type, status, started_at, completed_at)"
        " VALUES (?, 'dm:x', 'turn', 'completed', 1, 2)",
        [(f"t{i:06d}",) for i in range(100)],
    )
    conn.execute("COMMIT")
    conn.close()


def per_read_us(path: Path, reads: int) -> float:
    conn = shadow(connect(path, readonly=True))
    sql = "SELECT id, status FROM turns WHERE id = ?"
    start = time.perf_counter()
    for i in range(reads):
        conn.execute(sql, (f"t{i % 100:06d}",)).fetchone()
    took = time.perf_counter() - start
    conn.close()
    return took / reads * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--finished", type=int, default=10_000)
    parser.add_argument("--reads", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "l.db"
        build(path, args.finished)
        with_index, without = [], []
        for _ in range(ROUNDS):
            with_index.append(per_read_us(path, args.reads))
            conn = connect(path)
            conn.execute("DROP INDEX erasures_running")
            conn.close()
            without.append(per_read_us(path, args.reads))
            conn = connect(path)
            conn.execute(
                "CREATE INDEX erasures_running ON erasures (finished_at) WHERE finished_at IS NULL"
            )
            conn.close()
    print(f"{args.finished} finished erasures, a point read of a turn through the views:")
    print(f"  with the index of running erasures: {statistics.median(with_index):.1f} µs")
    print(f"  without it:                         {statistics.median(without):.1f} µs")


if __name__ == "__main__":
    main()
