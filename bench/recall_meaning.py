"""Recall by meaning: the encoder's cost a message and the search's over N vectors.

    .venv/bin/python -m bench.recall_meaning [--messages 10000] [--repeat 20]

Encoding: the real all-MiniLM-L6-v2 (the `semantic` extra) on chat-sized messages
(about 20 words), in the indexer's batches and one query alone, ms a message.
Search: `ledger.recall.vectors.nearest` (limit 10) over `--messages` stored vectors
all in the caller's reach (the worst case: one person's whole history), in a
temporary SQLite file holding only the tables it reads, p50/p95 ms.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from broker.recall_indexer import BATCH
from ledger.recall.vectors import nearest
from plumbing.encoder import Encoder

WORDS = (
    "the token signature deploy release friday database migration auth login cache retry",
    "timeout queue worker session budget context summary error fix test build review",
)


def messages(n: int, rng: np.random.Generator) -> list[str]:
    return [" ".join(rng.choice(" ".join(WORDS).split(), size=20)) for _ in range(n)]


def encoding(repeat: int) -> None:
    enc = Encoder.load(None)
    rng = np.random.default_rng(1)
    enc.encode(messages(4, rng))  # warm
    batch, single = [], []
    for _ in range(repeat):
        texts = messages(BATCH, rng)
        t = time.perf_counter()
        enc.encode(texts)
        batch.append((time.perf_counter() - t) * 1000 / BATCH)
        t = time.perf_counter()
        enc.encode(["how did we validate the JWT last week?"])
        single.append((time.perf_counter() - t) * 1000)
    print(f"encode, batches of {BATCH}: p50 {statistics.median(batch):.2f} ms a message")
    print(f"encode, one query: p50 {statistics.median(single):.2f} ms")


def search(n: int, repeat: int) -> None:
    rng = np.random.default_rng(2)
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "v.db")
        conn.executescript(
            "CREATE TABLE turns (id TEXT PRIMARY KEY, session_label TEXT);"
            "CREATE TABLE messages (id INTEGER PRIMARY KEY, turn_id TEXT, role TEXT,"
            " content TEXT, created_at INTEGER);"
            "CREATE TABLE embeddings (message_id INTEGER PRIMARY KEY, session_label TEXT,"
            " vector BLOB); CREATE INDEX embeddings_session ON embeddings(session_label);"
        )
        vectors = rng.standard_normal((n, 384)).astype("<f4")
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        conn.executemany("INSERT INTO turns VALUES (?, 's')", [(f"t{i}",) for i in range(n)])
        conn.executemany(
            "INSERT INTO messages VALUES (?, ?, 'user', 'words', ?)",
            [(i, f"t{i}", i) for i in range(n)],
        )
        conn.executemany(
            "INSERT INTO embeddings VALUES (?, 's', ?)",
            [(i, vectors[i].tobytes()) for i in range(n)],
        )
        conn.commit()
        query = vectors[0].tobytes()
        nearest(conn, query, ["s"], 10)  # warm the page cache
        took = []
        for _ in range(repeat):
            t = time.perf_counter()
            hits = nearest(conn, query, ["s"], 10)
            took.append((time.perf_counter() - t) * 1000)
        assert hits[0].message == 0
        took.sort()
        p95 = took[int(0.95 * (len(took) - 1))]
        print(f"search over {n} vectors: p50 {statistics.median(took):.1f} ms, p95 {p95:.1f} ms")
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-encode", action="store_true")
    args = parser.parse_args()
    if not args.no_encode:
        encoding(args.repeat)
    search(args.messages, args.repeat)


if __name__ == "__main__":
    main()
