"""Our library Store beside the session stores of agent frameworks, side by side.

    .venv/bin/python -m bench.peers [--sessions 200] [--turns 50] [--synchronous NORMAL]
                                    [--only NAME ...]

The peers are the extra `bench` (`pip install -e '.[bench]'`); a peer whose
package is missing is reported as such, not skipped silently.

Workload (issue 22): `--sessions` sessions x `--turns` turns; a turn is two
items, a user message (about 120 bytes) and an assistant message (about 400),
appended in one call, each call awaited before the caller's next. Two runs:

- sequential: one caller, turn t of every session before turn t+1 of any;
- at once: one task per session, all running together, each awaiting its own.

Then `--reads` reads of the last 30 items of a random session, one at a time.
Printed per store and run: turns/s, the process's CPU time per turn over the
appends (all its threads: a figure that moves far less than turns/s when other
jobs share the machine), append p50/p99, last-30 read p50, the bytes of its
files after it closed, and its process's peak RSS. Every store
runs in a child process of its own (fresh files, its own RSS), one after
another on this machine; all at the same `synchronous` (the WAL journal for
all: the ledger, SQLiteSession and LangGraph use it by default; the plain
sqlite3 rows set it too).

Rows:
- `sqlite3 NORMAL|FULL, turn/txn`: the ceiling; the same rows (session id,
  item JSON, time) in one indexed table, one transaction a turn, no event loop.
  Its "at once" figure is the group-commit ceiling: 100 turns a transaction.
- `openai SQLiteSession`: `add_items`/`get_items(30)`, its connection set to
  the same `synchronous`.
- `langgraph AsyncSqliteSaver`: `aput` of a checkpoint holding the thread's
  messages (as a graph with a `messages` channel saves it), `aget_tuple` to read.
- `adk SqliteSessionService`, `adk DatabaseSessionService`, `ledger
  LedgerSessionService`: ADK's session services and ours (bench/peers_adk.py):
  a turn is two events.
- `ledger Store`, `ledger LedgerSession`: ours.

To add a row, write an adapter with `append`, `last30` and `close` and put its
opener in PEERS.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import anyio
import orjson

from bench.peers_adk import open_adk_database, open_adk_sqlite, open_ledger_service

WORDS = [
    "the",
    "of",
    "ledger",
    "session",
    "turn",
    "agent",
    "reply",
    "durable",
    "serial",
    "commit",
    "write",
    "read",
    "item",
]


def _texts(count: int, words: int, size: int) -> list[str]:
    rnd = random.Random(size)
    return [" ".join(rnd.choice(WORDS) for _ in range(words))[:size] for _ in range(count)]


# Made once, before any timing: drawing 90 random words a turn took 28 µs, a fifth
# of a ledger append's CPU, inside every row's timed loop (docs/performance.md).
TEXT_POOL = 1021  # a prime, so consecutive turns of a session walk the whole pool
USER_TEXTS = _texts(TEXT_POOL, 20, 120)
ANSWER_TEXTS = _texts(TEXT_POOL, 70, 400)


def items_of(session: int, turn: int) -> list[dict[str, Any]]:
    """Turn `turn` of `session`: fresh dicts, as a caller would build them."""
    n = (session * 1000 + turn) % TEXT_POOL
    return [
        {"role": "user", "content": USER_TEXTS[n], "type": "message"},
        {"role": "assistant", "content": ANSWER_TEXTS[n], "type": "message"},
    ]


class Peer(Protocol):
    async def append(self, sid: str, items: list[dict[str, Any]]) -> None: ...

    async def last30(self, sid: str) -> list[Any]: ...

    async def close(self) -> None: ...


# -- the peers ------------------------------------------------------------------


class LedgerStorePeer:
    def __init__(self, store: Any) -> None:
        self.store = store

    @classmethod
    async def open(cls, path: Path, sync: str) -> LedgerStorePeer:
        from ledger.api import Store

        return cls(await Store.open(path, synchronous="FULL" if sync == "FULL" else "NORMAL"))

    async def append(self, sid: str, items: list[dict[str, Any]]) -> None:
        await self.store.append(sid, items)

    async def last30(self, sid: str) -> list[Any]:
        return list(await self.store.last(sid, 30))

    async def close(self) -> None:
        await self.store.aclose()


class LedgerSessionPeer:
    def __init__(self, path: Path, sync: str) -> None:
        from ledger.integrations.openai_agents import LedgerSession

        self.path, self.sync = path, sync
        self.factory = LedgerSession
        self.sessions: dict[str, Any] = {}

    @classmethod
    async def open(cls, path: Path, sync: str) -> LedgerSessionPeer:
        return cls(path, sync)

    def _session(self, sid: str) -> Any:
        session = self.sessions.get(sid)
        if session is None:
            session = self.factory(
                sid, path=self.path, synchronous="FULL" if self.sync == "FULL" else "NORMAL"
            )
            self.sessions[sid] = session
        return session

    async def append(self, sid: str, items: list[dict[str, Any]]) -> None:
        await self._session(sid).add_items(items)

    async def last30(self, sid: str) -> list[Any]:
        return list(await self._session(sid).get_items(30))

    async def close(self) -> None:
        for session in self.sessions.values():
            session.close()


class OpenAISQLiteSessionPeer:
    def __init__(self, path: Path, sync: str) -> None:
        from agents import SQLiteSession

        configure = SQLiteSession._configure_connection

        class Same(SQLiteSession):
            @staticmethod
            def _configure_connection(conn: Any) -> None:
                configure(conn)
                conn.execute(f"PRAGMA synchronous = {sync}")

        self.path, self.factory = path, Same
        self.sessions: dict[str, Any] = {}

    @classmethod
    async def open(cls, path: Path, sync: str) -> OpenAISQLiteSessionPeer:
        return cls(path, sync)

    def _session(self, sid: str) -> Any:
        session = self.sessions.get(sid)
        if session is None:
            session = self.factory(sid, self.path)
            self.sessions[sid] = session
        return session

    async def append(self, sid: str, items: list[dict[str, Any]]) -> None:
        await self._session(sid).add_items(items)

    async def last30(self, sid: str) -> list[Any]:
        return list(await self._session(sid).get_items(30))

    async def close(self) -> None:
        for session in self.sessions.values():
            session.close()


class LangGraphPeer:
    def __init__(self, saver: Any, stack: AsyncExitStack) -> None:
        from langgraph.checkpoint.base import empty_checkpoint

        self.saver, self.stack, self.empty = saver, stack, empty_checkpoint
        self.threads: dict[str, tuple[dict[str, Any], list[Any], int]] = {}

    @classmethod
    async def open(cls, path: Path, sync: str) -> LangGraphPeer:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        stack = AsyncExitStack()
        saver = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(str(path)))
        await saver.setup()
        await saver.conn.execute(f"PRAGMA synchronous = {sync}")
        return cls(saver, stack)

    async def append(self, sid: str, items: list[dict[str, Any]]) -> None:
        config, messages, step = self.threads.get(
            sid, ({"configurable": {"thread_id": sid, "checkpoint_ns": ""}}, [], 0)
        )
        messages = [*messages, *items]
        checkpoint = self.empty()
        checkpoint["channel_values"] = {"messages": messages}
        checkpoint["channel_versions"] = {"messages": step + 1}
        config = await self.saver.aput(
            config, checkpoint, {"source": "loop", "step": step}, {"messages": step + 1}
        )
        self.threads[sid] = (config, messages, step + 1)

    async def last30(self, sid: str) -> list[Any]:
        found = await self.saver.aget_tuple({"configurable": {"thread_id": sid}})
        return list(found.checkpoint["channel_values"]["messages"][-30:])

    async def close(self) -> None:
        await self.stack.aclose()


Opener = Callable[[Path, str], Awaitable[Peer]]
PEERS: dict[str, tuple[str, Opener]] = {
    "openai": ("openai SQLiteSession", OpenAISQLiteSessionPeer.open),
    "langgraph": ("langgraph AsyncSqliteSaver", LangGraphPeer.open),
    "store": ("ledger Store", LedgerStorePeer.open),
    "ledgersession": ("ledger LedgerSession", LedgerSessionPeer.open),
    "adk-sqlite": ("adk SqliteSessionService", open_adk_sqlite),
    "adk-database": ("adk DatabaseSessionService", open_adk_database),
    "adk-ledger": ("ledger LedgerSessionService", open_ledger_service),
}
PLAIN = ("plain-NORMAL", "plain-FULL")


# -- one measurement, in a child process ------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def drive(peer: Peer, args: argparse.Namespace, at_once: bool) -> dict[str, float]:
    latencies: list[float] = []

    async def one(session: int, turn: int) -> None:
        items = items_of(session, turn)
        started = time.perf_counter()
        await peer.append(f"s{session}", items)
        latencies.append(time.perf_counter() - started)

    async def caller(session: int) -> None:
        for turn in range(args.turns):
            await one(session, turn)

    started, cpu = time.perf_counter(), time.process_time()
    if at_once:
        async with anyio.create_task_group() as tg:
            for session in range(args.sessions):
                tg.start_soon(caller, session)
    else:
        for turn in range(args.turns):
            for session in range(args.sessions):
                await one(session, turn)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    reads = []
    rnd = random.Random(7)
    for _ in range(args.reads):
        sid = f"s{rnd.randrange(args.sessions)}"
        t0 = time.perf_counter()
        got = await peer.last30(sid)
        reads.append(time.perf_counter() - t0)
        assert len(got) == min(30, 2 * args.turns), (sid, len(got))
    return {
        "turns_s": args.sessions * args.turns / elapsed,
        "cpu_us": cpu / (args.sessions * args.turns) * 1e6,
        "p50_ms": percentile(latencies, 0.5) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
        "read_p50_ms": percentile(reads, 0.5) * 1e3,
    }


def plain(path: Path, args: argparse.Namespace, sync: str, per_txn: int) -> dict[str, float]:
    """The ceiling: the same rows straight into sqlite3, `per_txn` turns a transaction."""
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {sync}")
    conn.execute(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL,"
        " data TEXT NOT NULL, created_at INTEGER NOT NULL)"
    )
    conn.execute("CREATE INDEX items_session ON items (session_id, id)")
    turns = [(s, t) for t in range(args.turns) for s in range(args.sessions)]
    latencies = []
    started, cpu = time.perf_counter(), time.process_time()
    for first in range(0, len(turns), per_txn):
        t0 = time.perf_counter()
        conn.execute("BEGIN")
        for s, t in turns[first : first + per_txn]:
            now = time.time_ns() // 1_000_000
            conn.executemany(
                "INSERT INTO items (session_id, data, created_at) VALUES (?, ?, ?)",
                [(f"s{s}", orjson.dumps(i).decode(), now) for i in items_of(s, t)],
            )
        conn.execute("COMMIT")
        latencies.append(time.perf_counter() - t0)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    reads = []
    rnd = random.Random(7)
    for _ in range(args.reads):
        t0 = time.perf_counter()
        rows = conn.execute(
            "SELECT data FROM items WHERE session_id = ? ORDER BY id DESC LIMIT 30",
            (f"s{rnd.randrange(args.sessions)}",),
        ).fetchall()
        [orjson.loads(r[0]) for r in reversed(rows)]
        reads.append(time.perf_counter() - t0)
    conn.close()
    return {
        "turns_s": len(turns) / elapsed,
        "cpu_us": cpu / len(turns) * 1e6,
        "p50_ms": percentile(latencies, 0.5) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
        "read_p50_ms": percentile(reads, 0.5) * 1e3,
    }


def disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


async def measure(name: str, mode: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    path = folder / "store.db"
    if name in PLAIN:
        result = plain(path, args, name.split("-")[1], 100 if mode == "at_once" else 1)
    else:
        peer = await PEERS[name][1](path, args.synchronous)
        try:
            result = await drive(peer, args, at_once=mode == "at_once")
        finally:
            await peer.close()
    result["bytes"] = disk_bytes(folder)
    result["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def child(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="peers-") as folder:
        result = anyio.run(measure, args.child, args.mode, args, Path(folder))
    sys.stdout.write(orjson.dumps(result).decode() + "\n")


# -- the command ------------------------------------------------------------------


def run_child(name: str, mode: str, args: argparse.Namespace) -> dict[str, Any] | str:
    argv = [sys.executable, "-m", "bench.peers", "--child", name, "--mode", mode]
    for key in ("sessions", "turns", "reads", "synchronous"):
        argv += [f"--{key}", str(getattr(args, key))]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"failed: {last[:100]}"
    value: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return value


def label_of(name: str) -> str:
    if name in PLAIN:
        return f"sqlite3 {name.split('-')[1]}, turn/txn (at once: 100 turns/txn)"
    return PEERS[name][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--synchronous", choices=("NORMAL", "FULL"), default="NORMAL")
    parser.add_argument("--only", nargs="*", help=f"of {[*PLAIN, *PEERS]}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    names = args.only or [*PLAIN, *PEERS]
    print(
        f"# bench.peers {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores,"
        f" {args.sessions} sessions x {args.turns} turns (2 items a turn),"
        f" synchronous={args.synchronous} (WAL) for every store except the sqlite3 FULL row"
    )
    print(
        "| store | run | turns/s | CPU µs/turn | append p50 ms | p99 ms | last-30 read p50 ms"
        " | MB on disk | peak RSS MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        for mode in ("sequential", "at_once"):
            got = run_child(name, mode, args)
            if isinstance(got, str):
                print(f"| {label_of(name)} | {mode} | {got} | | | | | | |", flush=True)
                continue
            print(
                f"| {label_of(name)} | {mode.replace('_', ' ')} | {got['turns_s']:,.0f}"
                f" | {got['cpu_us']:.0f} | {got['p50_ms']:.3f} | {got['p99_ms']:.3f}"
                f" | {got['read_p50_ms']:.3f}"
                f" | {got['bytes'] / 1e6:.2f} | {got['rss_mb']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
