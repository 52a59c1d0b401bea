"""Recall hint benchmark: the check a turn makes before its first engine call.

    .venv/bin/python -m bench.recall_hint [--messages 20000] [--checks 2000]
                                          [--path /tmp/agent-broker-bench/hint-20000.db]

The ledger is `bench.recall`'s (built once and cached at `--path`): 1,000 sessions of
Zipf sizes, `--messages` / 2 turns (20,000 messages: 10,000 turns). The check runs for
the largest session, with its latest messages (about 24 KB, some 6,000 tokens) as the
assembled context, on messages that name, in backticks and as paths and names, a
made-up word of an old turn of the session (found), made-up words no message holds
(absent), and a common word (the index's longest doclists), plus "like we discussed".

Timed per check, as the turn does it (broker/mailbox/turn_steps.py): the
context's text joined and lower-cased, `recall_hint.select`, the index lookup through
the ledger's reader pool (`Ledger.recall_hint_terms`: a hop to a reader thread and
back), and `hint_line`. Prints p50/p99/max of each part and of the whole; `index` is
the same lookup timed on a connection of this thread, without the hop, and `best of
3` its fastest of three runs per check: what the index work costs once the machine's
preemptions are taken out. Target: p99 of the whole under 2 ms.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import time
from pathlib import Path

import anyio

from bench.recall import build, cached, pct, vocabulary
from core import recall_hint
from ledger.db import connect
from ledger.recall import hint as ledger_hint
from ledger.sqlite.store import Ledger

CONTEXT_CHARS = 24_000


def largest_session(conn: sqlite3.Connection) -> str:
    row = conn.execute(
        "SELECT session_label FROM turns GROUP BY 1 ORDER BY count(*) DESC LIMIT 1"
    ).fetchone()
    return str(row[0])


def context_and_old_words(conn: sqlite3.Connection, label: str) -> tuple[list[str], list[str]]:
    """The session's newest messages (the context, newest first, about CONTEXT_CHARS)
    and words of its older messages that the context does not hold."""
    rows = conn.execute(
        "SELECT m.content FROM turns t JOIN messages m ON m.turn_id = t.id"
        " WHERE t.session_label = ? ORDER BY t.started_at DESC, m.seq DESC",
        (label,),
    ).fetchall()
    shown, size, n = [], 0, 0
    while n < len(rows) and size < CONTEXT_CHARS:
        shown.append(str(rows[n][0]))
        size += len(shown[-1])
        n += 1
    seen = " ".join(shown).lower()
    older = {w.strip(".") for r in rows[n:] for w in str(r[0]).split()}
    return shown, sorted(w for w in older if len(w) >= 6 and w not in seen)


def messages(rng: random.Random, found: list[str], absent: list[str], count: int) -> list[str]:
    out = []
    for _ in range(count):
        parts = [
            f"Can you look at `{rng.choice(found)}` again",
            f"and {rng.choice(absent).title()}{rng.choice(absent).title()}",
            f"in src/{rng.choice(absent)}/{rng.choice(absent)}.py",
            "and the `error` we had" if rng.random() < 0.5 else "",
            "like we discussed?" if rng.random() < 0.5 else "?",
        ]
        out.append(" ".join(p for p in parts if p))
    return out


async def run(path: Path, checks: int, seed: int) -> None:
    conn = connect(path)
    try:
        label = largest_session(conn)
        shown, old = context_and_old_words(conn, label)
        turns = conn.execute("SELECT count(*) FROM turns").fetchone()[0]
        mine = conn.execute(
            "SELECT count(*) FROM turns WHERE session_label = ?", (label,)
        ).fetchone()[0]
    finally:
        conn.close()
    rng = random.Random(seed)
    words = vocabulary(random.Random(7))
    absent = [w + "zq" for w in rng.sample(words[-20_000:], 200)]  # no message holds these
    texts = messages(rng, old[:300], absent, checks)
    print(
        f"ledger: {turns} turns; session {label}: {mine} turns, context of {len(shown)}"
        f" messages ({sum(map(len, shown))} chars), {len(old)} old-only words"
    )
    parts: dict[str, list[float]] = {
        "context": [],
        "select": [],
        "lookup": [],
        "whole": [],
        "index": [],
        "best of 3": [],
    }
    hinted = 0
    async with Ledger.open(path, writer="thread", check_s=0) as ledger:
        for text in texts[:50]:  # warm the readers' page caches
            q = recall_hint.select(text, "")
            await ledger.recall_hint_terms(label, q.terms, ())
        for text in texts:
            t0 = time.perf_counter()
            context = "\n".join(shown).lower()
            t1 = time.perf_counter()
            query = recall_hint.select(text, context)
            t2 = time.perf_counter()
            found = await ledger.recall_hint_terms(label, query.terms, ())
            t3 = time.perf_counter()
            line = recall_hint.hint_line(found, query.refers_back, older_turns=True)
            t4 = time.perf_counter()
            hinted += line is not None and bool(found)
            for key, span in (("context", t1 - t0), ("select", t2 - t1), ("lookup", t3 - t2)):
                parts[key].append(span * 1000)
            parts["whole"].append((t4 - t0) * 1000)
    direct = connect(path)
    try:
        for text in texts:
            query = recall_hint.select(text, "")
            runs = []
            for _ in range(3):
                t0 = time.perf_counter()
                ledger_hint.found_terms(direct, label, query.terms, ())
                runs.append((time.perf_counter() - t0) * 1000)
            parts["index"].append(runs[0])
            parts["best of 3"].append(min(runs))
    finally:
        direct.close()
    print(f"{checks} checks, {hinted} with a term found; load average {os.getloadavg()[0]:.2f}")
    print(f"{'part':9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for key, times in parts.items():
        print(f"{key:9} {pct(times, 0.5):8.3f} {pct(times, 0.99):8.3f} {max(times):8.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--checks", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--path", type=Path, default=None)
    args = parser.parse_args()
    path = args.path or Path(f"/tmp/agent-broker-bench/hint-{args.messages}.db")
    if cached(path, args.messages, 7, False):
        print(f"using the cached ledger {path}")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        build(path, args.messages, 7)
        print(f"built {path} ({args.messages} messages) in {time.perf_counter() - start:.0f} s")
    anyio.run(run, path, args.checks, args.seed)


if __name__ == "__main__":
    main()
