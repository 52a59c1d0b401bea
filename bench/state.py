"""State-record benchmark: `session.state`, `scratchpad.get` and `scratchpad.merge`
over the wire at 10,000 sessions.

    .venv/bin/python -m bench.state [--sessions 10000] [--turns 4] [--calls 3000]

First it builds the ledger through the ledger's own port (in this process, its
writer on a thread, the daemon not yet running): `--sessions` DM sessions, each
with `--turns` committed turns whose tool calls and events fill the state
record's lists (20 files, 10 decisions, 5 errors), and a scratchpad. Then it
starts the real daemon on that ledger (echo engine, writer process) and, on one
operator connection, calls each op `--calls` times on random sessions, each call
waiting for its answer: the p50, p99 and worst round trips are printed. Aim: a
p99 under 2 ms for each op.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import orjson

from core.engine_types import ToolCall
from core.identity import SessionSpec
from ledger import events, state_reads
from ledger.port.records import InboundRecord, ItemInfo, TurnRecord
from ledger.sqlite.store import Ledger
from plumbing.ids import new_id
from tests.harness import DaemonProcess
from wire.client import BrokerClient

DM = SessionSpec(None, None)


def config() -> dict[str, Any]:
    return {"log_level": "warning", "engine": {"kind": "echo", "delay_ms": 0, "chunks": 1}}


def a_turn(label: str, parent: str | None, items: list[ItemInfo], n: int, now: int) -> TurnRecord:
    """A turn whose calls and events add 8 files, 4 decisions and 2 errors to the record."""
    calls = [
        ToolCall(
            new_id(), "edit_file", orjson.dumps({"path": f"src/m{n}_{k}.py"}).decode(), "ok", "ok"
        )
        for k in range(6)
    ]
    calls.append(ToolCall(new_id(), "run_tests", '{"k": "all"}', f"{n} failed", "error"))
    events: list[tuple[str, dict[str, Any]]] = [
        ("file", {"path": f"docs/d{n}_{k}.md", "op": "edit"}) for k in range(2)
    ]
    events += [
        ("decision", {"text": f"decision {k} of turn {n}: keep it simple"}) for k in range(4)
    ]
    events.append(("error", {"text": f"lint warning {n}"}))
    return TurnRecord(
        turn_id=new_id(),
        session=label,
        parent_id=parent,
        type="turn",
        status="completed",
        reason=None,
        error=None,
        output=f"reply {n}",
        engine="echo",
        model="bench-model",
        started_at=now,
        completed_at=now + 1,
        prompt_tokens=100,
        completion_tokens=20,
        inputs=items,
        item_status="done",
        tool_calls=calls,
        events=events,
    )


async def build(path: Path, sessions: int, turns: int) -> list[str]:
    """The ledger at `path` with `sessions` sessions of `turns` turns each; their labels."""
    now = time.time_ns() // 1_000_000
    heads: dict[str, str | None] = {}
    async with Ledger.open(path, writer="thread", check_s=0) as ledger:
        for n in range(turns):
            batch = [
                (
                    InboundRecord(
                        "sms", f"m{s}-{n}", f"+{s}", None, "dm", f"+{s}", None,
                        f"message {n} from {s}: let us work on module {n}", None, None, None,
                    ),
                    DM,
                )
                for s in range(sessions)
            ]  # fmt: skip
            for start in range(0, sessions, 1000):
                await ledger.ingest(batch[start : start + 1000], now)
            open_items = await ledger.open_items()
            pending = []
            for item in open_items:
                rec = a_turn(item.session, heads.get(item.session), [item], n, now)
                heads[item.session] = rec.turn_id
                pending.append(ledger.submit_turn(rec))
            for p in pending:
                await p.result()
            now += 10
        for label in heads:
            await ledger.scratchpad_merge(label, {"plan": {"step": 1}, "notes": "x" * 200}, now)
    return list(heads)


async def measure(d: DaemonProcess, labels: list[str], calls: int) -> None:
    rng = random.Random(7)
    ops: list[tuple[str, dict[str, Any]]] = [
        ("session.state", {}),
        ("scratchpad.get", {}),
        ("scratchpad.merge", {"patch": {"plan": {"step": 2}, "seen": 1}}),
    ]
    async with await BrokerClient.connect(d.socket) as c:
        for name, extra in ops:
            for label in rng.sample(labels, min(200, len(labels))):  # warm up
                await c.op(name, session=label, **extra)
            took = []
            for _ in range(calls):
                label = rng.choice(labels)
                started = time.perf_counter()
                await c.op(name, session=label, **extra)
                took.append((time.perf_counter() - started) * 1000)
            p99 = statistics.quantiles(took, n=100)[98]
            print(
                f"{name}: {calls} calls at {len(labels)} sessions:"
                f" p50 {statistics.median(took):.3f} ms, p99 {p99:.3f} ms,"
                f" max {max(took):.3f} ms (load average {os.getloadavg()[0]:.2f})"
            )


def direct_reads(path: Path, labels: list[str], calls: int) -> None:
    """The reads themselves, on one connection in this process: what an op costs the
    ledger, without the socket, the event loop and the reader thread's hop."""
    rng = random.Random(8)
    conn = sqlite3.connect(path)
    try:
        for name, fn in (
            ("session.state", state_reads.session_state_json),
            ("scratchpad.get", events.scratchpad_get),
        ):
            took = []
            for _ in range(calls):
                label = rng.choice(labels)
                started = time.perf_counter()
                fn(conn, label)
                took.append((time.perf_counter() - started) * 1000)
            p99 = statistics.quantiles(took, n=100)[98]
            print(f"{name} read alone: p50 {statistics.median(took):.3f} ms, p99 {p99:.3f} ms")
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bst-", dir="/tmp") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        labels = anyio.run(build, work / "ledger.db", args.sessions, args.turns)
        print(
            f"built {len(labels)} sessions of {args.turns} turns in"
            f" {time.monotonic() - started:.1f} s"
        )
        direct_reads(work / "ledger.db", labels, args.calls)
        print(f"load average (1 min) before the daemon: {os.getloadavg()[0]:.2f}")
        with DaemonProcess(work, config()) as daemon:

            async def body() -> None:
                await measure(daemon, labels, args.calls)

            anyio.run(body)


if __name__ == "__main__":
    main()
