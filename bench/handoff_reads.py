"""The hand-off look on SQLite (ledger/handoffs.py): its read on a ledger holding many
finished queue items, as it is and as it was before SQLite's `queue_items_unhanded`
went (the table read in seq order up to the LIMIT, with that index in place).

    .venv/bin/python -m bench.handoff_reads [--finished 100000] [--queued 20]

A node on the Temporal runtime runs this read every half second; its cost should
follow the items in flight, not every item ever queued.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ledger import handoffs
from ledger.db import connect, migrate
from ledger.items import ITEM_COLUMNS

BEFORE = (
    f"SELECT {ITEM_COLUMNS} FROM queue_items q LEFT JOIN inbound i ON i.id = q.inbound_id"
    " WHERE q.status = 'queued' AND q.handed_at IS NULL AND q.created_at < ?"
    " ORDER BY q.seq LIMIT ?"
)
OLD_INDEX = (
    "CREATE INDEX queue_items_unhanded ON queue_items(created_at)"
    " WHERE status = 'queued' AND handed_at IS NULL"
)


def median_us(read: Callable[[], object], runs: int = 200) -> float:
    took = []
    for _ in range(runs):
        started = time.perf_counter()
        read()
        took.append(time.perf_counter() - started)
    return statistics.median(took) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--queued", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="handoffs-") as folder:
        conn = connect(Path(folder) / "ledger.db")
        migrate(conn)
        total = args.finished + args.queued
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO queue_items (id, session_label, source, payload, status, created_at,"
            " updated_at) VALUES (?, ?, 'timer', '{}', ?, ?, ?)",
            [
                (f"i{n}", f"s{n % 500}", "done" if n < args.finished else "queued", n, n)
                for n in range(total)
            ],
        )
        conn.execute("COMMIT")
        now = total + 1
        found = handoffs.unhanded_items(conn, now, 100)
        assert len(found) == min(100, args.queued)
        new = median_us(lambda: handoffs.unhanded_items(conn, now, 100))
        conn.execute(OLD_INDEX)
        assert conn.execute(BEFORE, (now, 100)).fetchall() == [tuple(i) for i in found]
        old = median_us(lambda: conn.execute(BEFORE, (now, 100)).fetchall())
        conn.close()
    print(
        f"hand-off look, {args.finished:,} finished + {args.queued} queued items:"
        f" before {old:,.0f} µs, now {new:,.0f} µs (median of 200)"
    )


if __name__ == "__main__":
    main()
