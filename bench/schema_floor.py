"""The floor the ledger's schema sets under bench.peers' "at once" run, beside its ceiling.

    .venv/bin/python -m bench.schema_floor [--rounds 3] [--sessions 200] [--turns 50]
                                           [--per-txn 100] [--batched] [--peers]

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

`--batched` adds the same turns written with the cheapest statements found on the
unchanged schema for a transaction's worth of turns: the floor of a Store
that wrote its group commit as a batch instead of a turn at a time. `--peers` adds
the Store itself and openai's `SQLiteSession` at once (bench.peers' `drive`, 200
tasks appending), so issue 22's other at-once aim, 12x the best peer, is read in the
same process too.

A batch is three statements whatever its size: one multi-row VALUES INSERT of the
turns, one of their messages, one UPDATE ... FROM VALUES of the sessions' heads.
Each session's first turn of the batch takes its parent from the sessions row
inside the INSERT (the Store's own subquery; '' in the parent column says so: an
empty id cannot be a turn's); a later turn of the same session takes the turn
before it, and the head moves once to its last turn. Of the shapes tried this ran
the fewest instructions (docs/performance.md, "The library").
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
import time
from pathlib import Path

import anyio

from bench.peers import PEERS, drive, items_of, plain
from ledger import fts
from ledger.api import Store
from ledger.api.engine import FTS_LAG
from ledger.api.records import LIBRARY, Row, encode_items
from ledger.api.writes import append_turn
from ledger.db import connect
from plumbing.ids import new_id

Turn = tuple[str, list[Row], int]  # a session's label, the turn's rows, its time (ms)

_TURNS = (
    "INSERT INTO turns (id, session_label, parent_id, started_at, completed_at, type, status,"
    " engine) SELECT column1, column2, coalesce(nullif(column3, ''), (SELECT head_turn_id"
    " FROM sessions WHERE label = column2)), column4, column4, 'turn', 'completed',"
    f" '{LIBRARY}' FROM (VALUES {{}})"
)
_MESSAGES = "INSERT INTO messages (turn_id, seq, role, content, created_at) VALUES {}"
_HEADS = (
    "UPDATE sessions SET head_turn_id = v.column1, turns = turns + v.column2, updated_at ="
    " v.column3 FROM (VALUES {}) AS v WHERE label = v.column4"
)


def create_sessions(path: Path, sessions: int) -> None:
    """A fresh ledger (the Store's migrations) holding the sessions, closed again."""

    async def make() -> None:
        async with await Store.open(path) as store:
            for s in range(sessions):
                await store.create(f"s{s}")

    asyncio.run(make())


def _values(rows: int, width: int) -> str:
    return ", ".join(["(" + ", ".join("?" * width) + ")"] * rows)


def append_batch(conn: sqlite3.Connection, batch: list[Turn]) -> None:
    """The turns of `batch`, in order, in three statements; the sessions exist."""
    last: dict[str, tuple[str, int, int]] = {}  # label: (its last turn, turns, time)
    turns: list[object] = []
    messages: list[object] = []
    for label, rows, now in batch:
        turn_id, before = new_id(), last.get(label)
        turns += (turn_id, label, "" if before is None else before[0], now)
        last[label] = (turn_id, 1 if before is None else before[1] + 1, now)
        for seq, (role, content) in enumerate(rows):
            messages += (turn_id, seq, role, content, now)
    heads = [x for label, (head, n, now) in last.items() for x in (head, n, now, label)]
    conn.execute(_TURNS.format(_values(len(batch), 4)), turns)
    conn.execute(_MESSAGES.format(_values(len(messages) // 5, 5)), messages)
    conn.execute(_HEADS.format(_values(len(last), 4)), heads)


def floor(
    path: Path,
    sessions: int,
    turns: int,
    per_txn: int,
    full_text: bool,
    batched: bool = False,
) -> tuple[float, float]:
    """(turns/s, CPU µs a turn) of the schema's own statements, `per_txn` turns a transaction."""
    create_sessions(path, sessions)
    conn = connect(path, "NORMAL")  # the pragmas the Store's writer connection has
    order = [(s, t) for t in range(turns) for s in range(sessions)]
    started, cpu = time.perf_counter(), time.process_time()
    waiting = 0  # messages not yet in the full-text index
    for first in range(0, len(order), per_txn):
        conn.execute("BEGIN IMMEDIATE")
        batch: list[Turn] = []
        for s, t in order[first : first + per_txn]:
            now = time.time_ns() // 1_000_000
            rows = encode_items(items_of(s, t))
            if batched:
                batch.append((f"s{s}", rows, now))
            else:
                append_turn(conn, f"s{s}", rows, now, False)
            waiting += len(rows)
        if batch:
            append_batch(conn, batch)
        if full_text and waiting >= FTS_LAG:  # as the Store does (ledger/api/engine.py)
            fts.index_new_messages(conn)
            waiting = 0
        conn.execute("COMMIT")
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    conn.close()
    return len(order) / elapsed, cpu / len(order) * 1e6


def peer_row(name: str, path: Path, args: argparse.Namespace, at_once: bool) -> tuple[float, float]:
    """(turns/s, CPU µs a turn) of bench.peers' peer `name`, driven as bench.peers does."""

    async def run() -> dict[str, float]:
        peer = await PEERS[name][1](path, "NORMAL")
        try:
            return await drive(peer, args, at_once)
        finally:
            await peer.close()

    got = anyio.run(run)
    return got["turns_s"], got["cpu_us"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--per-txn", type=int, default=100, help="turns a transaction")
    parser.add_argument("--batched", action="store_true", help="add the batched floor")
    parser.add_argument(
        "--peers", action="store_true", help="add the Store and SQLiteSession (openai-agents)"
    )
    args = parser.parse_args()
    ceiling_args = argparse.Namespace(sessions=args.sessions, turns=args.turns, reads=1)
    per_txn = args.per_txn
    shapes = [(False, "")] + ([(True, ", batched")] if args.batched else [])
    print(f"{args.sessions} sessions x {args.turns} turns, {per_txn} turns a transaction, NORMAL")
    print(
        f"{'round':<6}{'row':<44}{'turns/s':>9}{'CPU µs/turn':>13}{'x ceiling (CPU)':>17}"
        + (f"{'x peer (CPU)':>14}" if args.peers else "")
    )
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(1, args.rounds + 1):
            top = plain(Path(tmp) / f"ceiling{n}.db", ceiling_args, "NORMAL", per_txn)
            rows = [("sqlite3 plain table (the ceiling)", top["turns_s"], top["cpu_us"])]
            for full_text in (True, False):
                for batched, how in shapes:
                    text = ", full-text index" if full_text else ", no full text"
                    path = Path(tmp) / f"floor{n}{int(full_text)}{int(batched)}.db"
                    got = floor(path, args.sessions, args.turns, per_txn, full_text, batched)
                    rows.append(("ledger schema" + text + how, *got))
            if args.peers:
                for name in ("store", "openai"):
                    got = peer_row(name, Path(tmp) / f"{name}{n}.db", ceiling_args, per_txn > 1)
                    rows.append((PEERS[name][0] + (", at once" if per_txn > 1 else ""), *got))
            for name, rate, cpu_us in rows:
                share = top["cpu_us"] / cpu_us
                line = f"{n:<6}{name:<44}{rate:>9,.0f}{cpu_us:>13.1f}{share:>17.2f}"
                if args.peers:
                    line += f"{rows[-1][2] / cpu_us:>14.2f}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
