"""Erasure and expiry on a large ledger: how long each writer job holds the writer, the
whole erasure's time, and the file's size after expiring half the turns and a VACUUM.

    .venv/bin/python -m bench.forgetting [--people 2000] [--turns 50] [--target-turns 5000]

Builds a ledger of `people` DM sessions of `turns` turns each (a user message and a
reply of about 300 bytes a turn) plus one person with `target_turns` turns (twice as
many messages), with SQL of its own (fast), then runs the jobs of ledger/erasure.py and
ledger/retention.py on a writer connection, one transaction each, as the ledger's
writer runs them, timing each. Prints the step counts, the p50/p99/max hold per job,
and the sizes.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledger import erasure, retention
from ledger.db import connect, migrate
from ledger.fts import index_new_messages
from ledger.ingest import WriterConnection

DAY_MS = 86_400_000
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "herons",
    "wade",
    "in",
    "grey",
    "water",
]


def text(i: int, n: int) -> str:
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(n)) + f" w{i}"


def build(path: Path, people: int, turns: int, target_turns: int) -> str:
    conn = connect(path)
    migrate(conn)
    t0 = 1_600_000_000_000
    conn.execute("BEGIN")
    target = ""
    msg = 0
    for p in range(people + 1):
        n_turns = target_turns if p == people else turns
        ent = f"ent_{p:010d}"
        label = f"dm:{ent}"
        if p == people:
            target = ent
        conn.execute(
            "INSERT INTO entities (id, kind, name, created_at) VALUES (?, 'contact', ?, ?)",
            (ent, f"p{p}", t0),
        )
        conn.execute(
            "INSERT INTO contacts (channel, sender_id, entity_id, created_at) VALUES"
            " ('chat', ?, ?, ?)",
            (f"s{p}", ent, t0),
        )
        rows_t: list[tuple[object, ...]] = []
        rows_m: list[tuple[object, ...]] = []
        parent: str | None = None
        for t in range(n_turns):
            at = t0 + (t * DAY_MS * 100) // max(n_turns, 1)  # spread over 100 days
            tid = f"{at:013d}{p:06d}{t:07d}"
            rows_t.append((tid, label, parent, at, at + 1000, text(msg, 40)))
            rows_m.append((tid, 0, "user", "chat", f"s{p}", text(msg, 40), at))
            rows_m.append((tid, 1, "assistant", None, None, text(msg + 1, 40), at + 1000))
            msg += 2
            parent = tid
        conn.executemany(
            "INSERT INTO turns (id, session_label, parent_id, type, status, started_at,"
            " completed_at, output) VALUES (?, ?, ?, 'turn', 'completed', ?, ?, ?)",
            rows_t,
        )
        conn.executemany(
            "INSERT INTO messages (turn_id, seq, role, channel, sender_id, content, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows_m,
        )
        conn.execute(
            "INSERT INTO sessions (label, kind, entity_id, head_turn_id, origin, turns,"
            " created_at, updated_at) VALUES (?, 'dm', ?, ?, 'inbound', ?, ?, ?)",
            (label, ent, parent, n_turns, t0, t0),
        )
    index_new_messages(conn)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return target


def timed_jobs(
    conn: sqlite3.Connection,
    job: Callable[[sqlite3.Connection], Any],
    commits: list[float] | None = None,
    cpu: list[float] | None = None,
) -> list[float]:
    """Run `job` in its own transaction until it returns falsy; each one's hold in ms
    (and into `commits`, the COMMIT's part of it; into `cpu`, the CPU time this thread
    spent on it, which leaves out the time other processes took the core). The WAL is
    checkpointed between jobs, untimed, as the checkpointer would."""
    holds: list[float] = []
    while True:
        if len(holds) % 20 == 0:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        start, on_cpu = time.perf_counter(), time.thread_time()
        conn.execute("BEGIN IMMEDIATE")
        more = job(conn)
        index_new_messages(conn)
        committing = time.perf_counter()
        conn.execute("COMMIT")
        end = time.perf_counter()
        holds.append((end - start) * 1000)
        if commits is not None:
            commits.append((end - committing) * 1000)
        if cpu is not None:
            cpu.append((time.thread_time() - on_cpu) * 1000)
        if not more:
            return holds


def show(name: str, holds: list[float]) -> None:
    ranked = sorted(holds)

    def at(q: float) -> float:  # nearest rank
        return ranked[min(len(ranked) - 1, int(q * len(ranked)))]

    print(
        f"{name}: {len(holds)} jobs, hold p50 {at(0.5):.1f} ms, p99 {at(0.99):.1f} ms,"
        f" max {max(holds):.1f} ms, total {sum(holds) / 1000:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--people", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--target-turns", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/tmp") as work:
        path = Path(work) / "ledger.db"
        start = time.perf_counter()
        target = build(path, args.people, args.turns, args.target_turns)
        size = path.stat().st_size
        print(f"built {size / 1e6:.0f} MB in {time.perf_counter() - start:.0f} s")
        conn = connect(path, factory=WriterConnection)
        # As the writer's: checkpoints run beside it (ledger/writer/checkpoint.py), and a
        # checkpoint's time is not the job's.
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        start = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        plan = erasure.begin(conn, target, target, 0)
        conn.execute("COMMIT")
        mark_ms = (time.perf_counter() - start) * 1000
        print(f"erasure mark: {mark_ms:.1f} ms ({len(plan.sessions)} session)")
        by_step: dict[str, list[float]] = {}
        holds = []
        while True:
            plan_now = erasure.plan_of(conn, target)
            assert plan_now is not None
            name = erasure.STEPS[min(plan_now.step, len(erasure.STEPS) - 1)].__name__
            one = timed_jobs(conn, lambda c: (erasure.step(c, target), False)[1])
            by_step.setdefault(name, []).extend(one)
            holds.extend(one)
            if plan_now.step >= len(erasure.STEPS) - 1 and erasure.plan_of(conn, target) is None:
                break
            done = erasure.plan_of(conn, target)
            if done is None or done.step >= len(erasure.STEPS):
                break
        scrub = time.perf_counter()
        erasure.truncate_wal(path)
        scrub_ms = (time.perf_counter() - scrub) * 1000
        conn.execute("BEGIN IMMEDIATE")
        counts = erasure.finish(conn, target, 0)
        conn.execute("COMMIT")
        total = time.perf_counter() - start
        show("erasure steps", holds)
        for name, some in by_step.items():
            show(f"  {name}", some)
        print(f"erasure: {counts}, WAL truncate {scrub_ms:.0f} ms, whole {total:.1f} s")

        cutoff = 1_600_000_000_000 + 50 * DAY_MS
        after: list[str | None] = [None]

        def batch(c: sqlite3.Connection) -> bool:
            _, after[0] = retention.expire_batch(c, cutoff, after[0], 1)
            return after[0] is not None

        commits: list[float] = []
        cpu: list[float] = []
        holds = timed_jobs(conn, batch, commits, cpu)
        show("expiry batches (half the turns)", holds)
        show("  their COMMITs", commits)
        show("  their CPU time (BEGIN to COMMIT)", cpu)
        left = [-1]

        def merge(c: sqlite3.Connection) -> bool:
            left[0] = erasure.merge_index(c, left[0])
            return left[0] != 0

        holds = timed_jobs(conn, merge)
        show("index merge steps", holds)
        erasure.truncate_wal(path)
        conn.close()
        before = size
        vac = connect(path)
        start = time.perf_counter()
        vac.execute("VACUUM")
        vac.close()
        after_size = path.stat().st_size
        print(
            f"size: {before / 1e6:.0f} MB before, {after_size / 1e6:.0f} MB after expiry"
            f" and VACUUM ({after_size / before:.0%}; VACUUM {time.perf_counter() - start:.1f} s)"
        )


if __name__ == "__main__":
    main()
