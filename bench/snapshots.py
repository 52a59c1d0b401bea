"""File snapshot benchmark: `file.at` over a long thread, and storage when contents repeat.

    .venv/bin/python -m bench.snapshots [--turns 10000] [--versions 100] [--kb 100]

Builds a ledger in a temporary directory with one thread of `--turns` turns,
each committed by `ledger.turns.commit_turn` (the writer's own job) with a
`file` event carrying a `--kb` KB source file; the file cycles through
`--versions` distinct contents (each differs from the last in a few lines), so
every content repeats turns / versions times. A second file is written once,
by the first turn only.

Prints:
- the commit time of a turn with a snapshot (its content new, or seen before);
- `file.at` p50/p99 in ms at random turns, by the function on a read
  connection and through the port (`Ledger.file_at`, one hop to a reader
  thread), and the worst case: the file written only by the first turn, read
  at the head, a walk up the whole thread. Aim: p99 under 5 ms;
- storage: the pages of the `blobs` table against the distinct contents each
  compressed once (aim: at most 1.1x), and the bytes per snapshot of its rows
  (`file_snapshots` and the event).
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import anyio

from ledger import snapshots
from ledger.db import connect, migrate
from ledger.port.records import TurnRecord
from ledger.sqlite.store import Ledger
from ledger.turns import commit_turn

WORDS = [
    *("def", "return", "self", "value", "index", "session", "turn", "ledger", "write"),
    *("read", "path", "file", "async", "await", "import", "from", "class", "None", "True"),
    *("False", "if", "else", "for", "in", "while", "try", "except", "raise", "with", "as"),
]


def source_versions(kb: int, versions: int, rng: random.Random) -> list[bytes]:
    """`versions` contents of about `kb` KB of code-like text, each a few lines off the last."""
    lines: list[str] = []
    size = 0
    while size < kb * 1024:
        lines.append(
            "    " * rng.randint(0, 3) + " ".join(rng.choices(WORDS, k=rng.randint(3, 12)))
        )
        size += len(lines[-1]) + 1
    out = []
    for _ in range(versions):
        for _ in range(3):
            lines[rng.randrange(len(lines))] = " ".join(rng.choices(WORDS, k=8)) + "  # changed"
        out.append(("\n".join(lines) + "\n").encode())
    return out


def record(
    turn_id: str, parent: str | None, n: int, events: list[tuple[str, dict[str, Any]]]
) -> TurnRecord:
    return TurnRecord(
        turn_id=turn_id,
        session="bench",
        parent_id=parent,
        type="turn",
        status="completed",
        reason=None,
        error=None,
        output="done",
        engine="bench",
        model=None,
        started_at=n * 10,
        completed_at=n * 10 + 5,
        prompt_tokens=None,
        completion_tokens=None,
        inputs=[],
        item_status="done",
        events=events,
    )


def build(
    conn: sqlite3.Connection, turns: int, contents: list[bytes]
) -> tuple[list[str], dict[str, list[float]]]:
    conn.execute(
        "INSERT INTO sessions (label, kind, origin, created_at, updated_at)"
        " VALUES ('bench', 'dm', 'inbound', 0, 0)"
    )
    ids: list[str] = []
    timings: dict[str, list[float]] = {"new": [], "seen": []}
    parent = None
    for n in range(turns):
        content = contents[n % len(contents)].decode()
        events: list[tuple[str, dict[str, Any]]] = [
            ("file", {"path": "src/big.py", "op": "edit", "content": content})
        ]
        if n == 0:
            events.append(("file", {"path": "README.md", "op": "create", "content": "hello\n"}))
        turn_id = f"T{n:08d}"
        start = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        commit_turn(conn, record(turn_id, parent, n, events))
        conn.execute("COMMIT")
        timings["new" if n < len(contents) else "seen"].append(time.perf_counter() - start)
        ids.append(turn_id)
        parent = turn_id
    return ids, timings


def ms(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000 if len(values) > 1 else 0.0


def time_reads(conn: sqlite3.Connection, ids: list[str], rng: random.Random, n: int) -> list[float]:
    out = []
    for _ in range(n):
        turn = rng.choice(ids)
        start = time.perf_counter()
        snapshots.at(conn, "bench", "src/big.py", turn)
        out.append(time.perf_counter() - start)
    return out


async def time_port(path: Path, ids: list[str], rng: random.Random, n: int) -> list[float]:
    out = []
    async with Ledger.open(path, writer="thread", check_s=0) as ledger:
        for _ in range(n):
            turn = rng.choice(ids)
            start = time.perf_counter()
            await ledger.file_at("bench", "src/big.py", turn)
            out.append(time.perf_counter() - start)
    return out


def table_bytes(conn: sqlite3.Connection, *names: str) -> int:
    marks = ",".join("?" * len(names))
    row = conn.execute(
        f"SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN ({marks})", names
    )
    return int(row.fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--versions", type=int, default=100)
    parser.add_argument("--kb", type=int, default=100)
    parser.add_argument("--reads", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(21)
    contents = source_versions(args.kb, args.versions, rng)
    with tempfile.TemporaryDirectory(prefix="bench-snapshots-") as tmp:
        path = Path(tmp) / "ledger.db"
        conn = connect(path)
        migrate(conn)
        start = time.perf_counter()
        ids, commits = build(conn, args.turns, contents)
        print(
            f"built {args.turns} turns, each a {len(contents[0]) // 1024} KB snapshot"
            f" ({args.versions} distinct contents) in {time.perf_counter() - start:.1f} s"
        )
        for kind, values in commits.items():
            p50, p99 = ms(values, 50), ms(values, 99)
            print(f"commit, content {kind:>4}: p50 {p50:.2f} ms  p99 {p99:.2f} ms")
        reads = time_reads(conn, ids, rng, args.reads)
        print(f"file.at (function): p50 {ms(reads, 50):.2f} ms  p99 {ms(reads, 99):.2f} ms")
        port = anyio.run(time_port, path, ids, rng, args.reads)
        print(f"file.at (port):     p50 {ms(port, 50):.2f} ms  p99 {ms(port, 99):.2f} ms")
        worst = []
        for _ in range(20):
            t = time.perf_counter()
            snapshots.at(conn, "bench", "README.md", None)
            worst.append(time.perf_counter() - t)
        print(
            f"file.at worst case (written by turn 1 only, read at turn {args.turns}):"
            f" median {statistics.median(worst) * 1000:.2f} ms"
        )
        everything = [*contents, b"hello\n"]
        distinct = sum(len(zlib.compress(c, snapshots.ZLIB_LEVEL)) for c in everything)
        at_six = sum(len(zlib.compress(c, 6)) for c in everything)
        blobs = table_bytes(conn, "blobs", "sqlite_autoindex_blobs_1")
        rows = table_bytes(
            conn,
            "file_snapshots",
            "file_snapshots_turn_path",
            "file_snapshots_path",
            "file_snapshots_blob",
        )
        events = table_bytes(conn, "turn_events")
        print(
            f"storage: blobs {blobs / 1e6:.2f} MB for {distinct / 1e6:.2f} MB of distinct"
            f" contents compressed once at the same level = {blobs / distinct:.2f}x"
            f" ({blobs / at_six:.2f}x zlib's default level 6)"
            f" (raw: {sum(len(c) for c in contents) * args.turns / len(contents) / 1e6:.0f} MB"
            " of snapshots)"
        )
        print(
            f"per snapshot: {rows / args.turns:.0f} bytes of file_snapshots rows and indexes,"
            f" {events / args.turns:.0f} bytes of turn_events"
        )
        conn.close()


if __name__ == "__main__":
    main()
