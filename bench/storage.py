"""Where the bytes of bench.peers' history go: pages by B-tree, ours beside plain sqlite3.

    .venv/bin/python -m bench.storage [--sessions 200] [--turns 50] [--keep DIR]

Writes bench.peers' workload (`--sessions` x `--turns` turns of two items,
sequential, one call a turn) through `ledger.api.Store` and into bench.peers'
plain sqlite3 table, closes both, and prints the file sizes and each B-tree's
bytes (`dbstat`: pages times page size, so half-empty pages count whole, as
they do on disk) with its fill. Nothing is timed: bench.peers measures speed;
this says which table or index a change of schema shrinks. `--keep DIR` leaves
the two files there for EXPLAIN QUERY PLAN or timing on them.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

import anyio
import orjson

from bench.peers import items_of
from ledger.db import readonly_uri


async def write_store(path: Path, sessions: int, turns: int) -> None:
    from ledger.api import Store

    store = await Store.open(path, synchronous="NORMAL")
    try:
        for turn in range(turns):
            for session in range(sessions):
                await store.append(f"s{session}", items_of(session, turn))
    finally:
        await store.aclose()


def write_plain(path: Path, sessions: int, turns: int) -> None:
    """bench.peers' ceiling table, the same rows, one transaction a turn."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL,"
        " data TEXT NOT NULL, created_at INTEGER NOT NULL)"
    )
    conn.execute("CREATE INDEX items_session ON items (session_id, id)")
    for t in range(turns):
        for s in range(sessions):
            now = time.time_ns() // 1_000_000
            conn.execute("BEGIN")
            conn.executemany(
                "INSERT INTO items (session_id, data, created_at) VALUES (?, ?, ?)",
                [(f"s{s}", orjson.dumps(i).decode(), now) for i in items_of(s, t)],
            )
            conn.execute("COMMIT")
    conn.close()


def file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def breakdown(path: Path) -> list[tuple[str, int, float]]:
    """(B-tree, bytes, fill) for each B-tree of the file, largest first."""
    conn = sqlite3.connect(readonly_uri(path), uri=True)
    try:
        rows = conn.execute(
            "SELECT name, sum(pgsize), sum(pgsize - unused) * 1.0 / sum(pgsize)"
            " FROM dbstat GROUP BY name ORDER BY sum(pgsize) DESC"
        ).fetchall()
    finally:
        conn.close()
    return [(str(name), int(size), float(fill)) for name, size, fill in rows]


def report(title: str, path: Path) -> int:
    total = file_bytes(path)
    print(f"\n{title}: {total / 1e6:.2f} MB on disk")
    print("| B-tree | MB | fill |")
    print("|---|---|---|")
    for name, size, fill in breakdown(path):
        if size >= 10_000:
            print(f"| {name} | {size / 1e6:.2f} | {fill:.0%} |")
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--keep", type=Path, help="a folder to leave the two files in")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="storage-") as folder:
        ours, theirs = Path(folder) / "store.db", Path(folder) / "plain.db"
        anyio.run(write_store, ours, args.sessions, args.turns)
        write_plain(theirs, args.sessions, args.turns)
        mine = report("ledger Store", ours)
        plain = report("plain sqlite3", theirs)
        print(f"\nratio: {mine / plain:.2f}x")
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for path in (ours, theirs):
                shutil.copy(path, args.keep / path.name)


if __name__ == "__main__":
    main()
