"""Recall benchmark: full-text search over a ledger of a million messages.

    .venv/bin/python -m bench.recall [--path /tmp/agent-broker-bench/recall.db]
                                     [--messages 1000000] [--repeat 30] [--rebuild]

The ledger is built once and cached at `--path` (rebuilt when `--messages` or
the generator version differs, or with `--rebuild`): 1,000 sessions of very
different sizes (Zipf), turns of one user and one assistant message, a tool
call every fourth turn. The text is drawn deterministically from a Zipf
vocabulary of common English and programming words followed by a long tail of
made-up words, so there are words in most messages and words in a few dozen.
Rows go in with executemany inside one transaction with the FTS trigger
dropped, then one FTS5 'rebuild' (faster than the trigger row by row), and the
trigger is put back as the migration wrote it.

Then it times `ledger.recall.search.search` (limit 20) for rare, mid-frequency and
common words, a phrase and a prefix, over all sessions and within one large
and one small session, and prints p50/p95 milliseconds. Target: < 20 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sqlite3
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.ids import UlidSequence
from ledger.db import connect, migrate
from ledger.fts import index_new_messages
from ledger.recall import search as recall

VERSION = "1"
SESSIONS = 1000
START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
CHUNK_TURNS = 25_000
POOL = 4_000_000
Rows = list[tuple[object, ...]]

# A list literal of 300 words reads worse than a string split.
COMMON = """
the to and a of is in it that for you we this with on be can not are I if
file error test run should will have from as or but do use code function the
what when add fix check change need make one so at by an new all data just
line value return config make update call also get set build type name
database query table index session message user model tool result output
server client request response api token cache timeout retry queue worker
python module import class method async await task loop thread lock write read
path directory commit branch merge review deploy release version package install
auth login password key secret permission role admin account email
migration schema column row transaction sqlite postgres ledger broker engine
context window prompt summary compaction memory recall search history turn
docs readme comment issue bug feature refactor cleanup performance latency
benchmark throughput memory leak crash restart signal shutdown deadline cancel
json yaml toml parse format string list dict number integer float bool none
""".split()  # noqa: SIM905
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]


def vocabulary(rng: random.Random, tail: int = 30_000) -> list[str]:
    """Common words first (most frequent), then `tail` distinct made-up words."""
    words = list(dict.fromkeys(COMMON))
    seen = set(words)
    while len(words) < len(COMMON) + tail:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def ulid_at(ms: int, random: int) -> str:
    """The ULID of this millisecond and random part (turn ids made in time order)."""
    return UlidSequence().next(ms, lambda: random)


@dataclass
class Generator:
    """Deterministic rows for sessions, turns, messages and tool calls."""

    seed: int
    messages: int

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.words = vocabulary(self.rng)
        # A pool of Zipf-distributed words; a message is a window of it at a
        # random offset (drawing every word anew costs ~1 µs a word).
        pool = self.rng.choices(self.words, cum_weights=_cum(self.words), k=POOL)
        for i in range(11, POOL, 12):
            pool[i] += "."
        self.pool = pool
        self.session_cum = _cum([str(n) for n in range(SESSIONS)])
        self.heads: dict[str, str | None] = {}

    def labels(self) -> list[str]:
        return [f"dm:bench:{n:04d}" for n in range(SESSIONS)]

    def text(self, n_words: int) -> str:
        start = self.rng.randrange(POOL - n_words)
        return " ".join(self.pool[start : start + n_words])

    def chunks(self) -> Iterator[tuple[Rows, Rows, Rows]]:
        """(turns, messages, tool calls) in chunks; then `self.heads` is set."""
        labels = self.labels()
        heads: dict[str, str | None] = dict.fromkeys(labels)
        now = START_MS
        msg_id = 0
        for first in range(0, self.messages // 2, CHUNK_TURNS):
            count = min(CHUNK_TURNS, self.messages // 2 - first)
            owners = self.rng.choices(labels, cum_weights=self.session_cum, k=count)
            turns: Rows = []
            msgs: Rows = []
            calls: Rows = []
            for n, label in enumerate(owners):
                now += self.rng.randint(1_000, 60_000)
                turn_id = ulid_at(now, first + n)
                turns.append(
                    (turn_id, label, heads[label], now, now + 900, 100 + n % 900, 20 + n % 300)
                )
                heads[label] = turn_id
                user = self.text(self.rng.randint(4, 30))
                reply = self.text(self.rng.randint(8, 60))
                msgs.append((msg_id + 1, turn_id, 0, "user", user, now))
                msgs.append((msg_id + 2, turn_id, 1, "assistant", reply, now + 900))
                msg_id += 2
                if n % 4 == 0:
                    args = f'{{"path": "src/{self.words[n % 500]}.py"}}'
                    calls.append((f"call_{turn_id}", turn_id, "read_file", args, reply, now + 900))
            yield turns, msgs, calls
        self.heads = heads


def _cum(ranked: list[str]) -> list[float]:
    """Cumulative Zipf weights (1/rank) for items in rank order."""
    out, total = [], 0.0
    for rank in range(1, len(ranked) + 1):
        total += 1 / rank
        out.append(total)
    return out


def build(path: Path, messages: int, seed: int = 7) -> None:
    """Write the benchmark ledger to `path` (replacing it), atomically."""
    tmp = path.with_name(path.name + ".building")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    conn = connect(tmp, "NORMAL")
    migrate(conn)
    gen = Generator(seed, messages)
    conn.execute("BEGIN")
    conn.execute("CREATE TABLE bench_meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.executemany(
        "INSERT INTO sessions (label, kind, origin, created_at, updated_at)"
        " VALUES (?, 'dm', 'inbound', ?, ?)",
        [(label, START_MS, START_MS) for label in gen.labels()],
    )
    for turns, msgs, calls in gen.chunks():
        _insert_chunk(conn, turns, msgs, calls)
    conn.executemany(
        "UPDATE sessions SET head_turn_id = ?2,"
        " turns = (SELECT count(*) FROM turns WHERE session_label = ?1) WHERE label = ?1",
        list(gen.heads.items()),
    )
    index_new_messages(conn)  # all of them in one statement, as the writer does per batch
    conn.execute(
        "INSERT INTO bench_meta VALUES ('version', ?), ('messages', ?), ('seed', ?)",
        (VERSION, messages, seed),
    )
    conn.execute("COMMIT")
    conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")
    conn.execute("ANALYZE")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    tmp.replace(path)


def _insert_chunk(conn: sqlite3.Connection, turns: Rows, msgs: Rows, calls: Rows) -> None:
    conn.executemany(
        "INSERT INTO turns (id, session_label, parent_id, type, status, output, engine,"
        " started_at, completed_at, prompt_tokens, completion_tokens)"
        " VALUES (?1, ?2, ?3, 'turn', 'completed', '', 'bench', ?4, ?5, ?6, ?7)",
        turns,
    )
    conn.executemany(
        "INSERT INTO messages (id, turn_id, seq, role, content, created_at) VALUES (?,?,?,?,?,?)",
        msgs,
    )
    conn.executemany(
        "INSERT INTO tool_calls (id, turn_id, seq, name, arguments, result, status, created_at)"
        " VALUES (?1, ?2, 0, ?3, ?4, ?5, 'ok', ?6)",
        calls,
    )


def cached(path: Path, messages: int, seed: int, rebuild: bool) -> bool:
    """Whether `path` already holds this benchmark's ledger."""
    if rebuild or not path.exists():
        return False
    with contextlib.closing(sqlite3.connect(path)) as conn:
        try:
            meta = dict(conn.execute("SELECT key, value FROM bench_meta").fetchall())
        except sqlite3.Error:
            return False
    return meta == {"version": VERSION, "messages": str(messages), "seed": str(seed)}


def queries(seed: int) -> list[tuple[str, str]]:
    words = vocabulary(random.Random(seed))  # the generator's vocabulary, rank order
    return [
        ("rare word", words[-5000]),
        ("mid word (~2%)", "ledger"),
        ("common word (~10%)", "error"),
        ("two words", "error session"),
        ("phrase", '"file error"'),
        ("prefix", "sess*"),
        ("sentence", "what was the error in the session worker?"),
        ("stopword", "the"),
    ]


def scopes(conn: sqlite3.Connection) -> list[tuple[str, str | None]]:
    sizes = conn.execute(
        "SELECT session_label, count(*) FROM turns GROUP BY 1 ORDER BY 2 DESC"
    ).fetchall()
    out: list[tuple[str, str | None]] = [("all sessions", None)]
    for rank in (0, 10, 100):
        label, turns = sizes[min(rank, len(sizes) - 1)]
        out.append((f"{turns * 2} msgs", str(label)))
    return out


def time_query(
    conn: sqlite3.Connection, query: str, session: str | None, repeat: int
) -> tuple[list[float], int]:
    hits = len(recall.search(conn, query, session, 20))  # warm the page cache
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        recall.search(conn, query, session, 20)
        times.append((time.perf_counter() - start) * 1000)
    return times, hits


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def report(conn: sqlite3.Connection, seed: int, repeat: int) -> None:
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'query':22} {'scope':14} {'hits':>4} {'min ms':>8} {'p50 ms':>8} {'p95 ms':>8}")
    everything: list[float] = []
    for name, text in queries(seed):
        for scope, session in scopes(conn):
            times, hits = time_query(conn, text, session, repeat)
            everything += times
            print(
                f"{name:22} {scope:14} {hits:4} {min(times):8.2f} {pct(times, 0.5):8.2f}"
                f" {pct(times, 0.95):8.2f}"
            )
    print(
        f"all queries: p50 {statistics.median(everything):.2f} ms,"
        f" p95 {pct(everything, 0.95):.2f} ms, max {max(everything):.2f} ms;"
        f" load average {os.getloadavg()[0]:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--path", type=Path, default=Path("/tmp/agent-broker-bench/recall.db"))
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    if cached(args.path, args.messages, args.seed, args.rebuild):
        print(f"using the cached ledger {args.path}")
    else:
        args.path.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        build(args.path, args.messages, args.seed)
        print(
            f"built {args.path} ({args.messages} messages) in {time.perf_counter() - start:.0f} s"
        )
    conn = connect(args.path)
    try:
        report(conn, args.seed, args.repeat)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
