"""The floor the ledger's schema sets under bench.peers' "at once" run, beside its ceiling.

    .venv/bin/python -m bench.schema_floor [--rounds 3] [--sessions 200] [--turns 50]
                                           [--per-txn 100]

bench.peers compares our Store with plain sqlite3 writing the same items into one
indexed table, 100 turns a transaction (the group-commit ceiling; issue 22 asks for
0.6x of it). A library turn is an ordinary ledger turn, written by the same schema as
the daemon's (issue 22: "the same schema, migrations and single-writer rule"): a turn
row and its two indexes, the messages and their `(turn_id, seq)` index, the foreign
keys checked, the session's head moved, the full-text index kept up to date. This
runs exactly those statements (`ledger.api.writes.append_turn`, and
`fts.index_new_messages` once FTS_LAG messages wait, as the Store does) straight on
one sqlite3 connection set as the Store sets its own, with no Store, no event loop
and no thread: what any implementation on this schema pays at the least. Each round
runs the ceiling (the very function bench.peers times), then the floor with and
without the full-text index, in this one process; the CPU time a turn is the figure
other jobs on the machine move least. `--per-txn 1` gives the same for the
sequential run (a transaction a turn, both rows).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
import time
from pathlib import Path

from bench.peers import items_of, plain
from ledger import fts
from ledger.api import Store
from ledger.api.engine import FTS_LAG
from ledger.api.records import encode_items
from ledger.api.writes import append_turn


def create_sessions(path: Path, sessions: int) -> None:
    """A fresh ledger (the Store's migrations) holding the sessions, closed again."""

    async def make() -> None:
        async with await Store.open(path) as store:
            for s in range(sessions):
                await store.create(f"s{s}")

    asyncio.run(make())


def floor(
    path: Path, sessions: int, turns: int, per_txn: int, full_text: bool
) -> tuple[float, float]:
    """(turns/s, CPU µs a turn) of the schema's own statements, `per_txn` turns a transaction."""
    create_sessions(path, sessions)
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "foreign_keys = ON"):
        conn.execute(f"PRAGMA {pragma}")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute("PRAGMA cache_size = -65536")  # as ledger/db.py sets it
    order = [(s, t) for t in range(turns) for s in range(sessions)]
    started, cpu = time.perf_counter(), time.process_time()
    waiting = 0  # messages not yet in the full-text index
    for first in range(0, len(order), per_txn):
        conn.execute("BEGIN IMMEDIATE")
        for s, t in order[first : first + per_txn]:
            now = time.time_ns() // 1_000_000
            rows = encode_items(items_of(s, t))
            append_turn(conn, f"s{s}", rows, now, False)
            waiting += len(rows)
        if full_text and waiting >= FTS_LAG:  # as the Store does (ledger/api/engine.py Rule 5)
            fts.index_new_messages(conn)
            waiting = 0
        conn.execute("COMMIT")
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    conn.close()
    return len(order) / elapsed, cpu / len(order) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--per-txn", type=int, default=100, help="turns a transaction")
    args = parser.parse_args()
    ceiling_args = argparse.Namespace(sessions=args.sessions, turns=args.turns, reads=1)
    per_txn = args.per_txn
    print(f"{args.sessions} sessions x {args.turns} turns, {per_txn} turns a transaction, NORMAL")
    print(f"{'round':<6}{'row':<34}{'turns/s':>9}{'CPU µs/turn':>13}{'x ceiling (CPU)':>17}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(1, args.rounds + 1):
            top = plain(Path(tmp) / f"ceiling{n}.db", ceiling_args, "NORMAL", per_txn)
            rows = [("sqlite3 plain table (the ceiling)", top["turns_s"], top["cpu_us"])]
            for full_text in (True, False):
                name = "ledger schema" + (", full-text index" if full_text else ", no full text")
                path = Path(tmp) / f"floor{n}{int(full_text)}.db"
                rows.append((name, *floor(path, args.sessions, args.turns, per_txn, full_text)))
            for name, rate, cpu_us in rows:
                share = top["cpu_us"] / cpu_us
                print(f"{n:<6}{name:<34}{rate:>9,.0f}{cpu_us:>13.1f}{share:>17.2f}")


if __name__ == "__main__":
    main()
