"""Ingest benchmark: acked messages per second and ack latency, against the real daemon.

    .venv/bin/python -m bench.ingest [--messages 100000] [--connections 8]

For synchronous=NORMAL and FULL it prints: the closed-loop rate with 8
pipelining adapter connections, ack latency p50/p99 at that load and at a fixed
offered rate (5,000 msg/s by default) on a fresh daemon (the issue's figure), the
p99 at that rate again on the daemon of the closed loop (which still holds its
100,000 collected messages in memory), and the ceiling: plain sqlite3 inserting
the same rows in 100-row transactions in one process; and the CPU time per
message of the closed-loop run, of the daemon (all threads), of its ledger
writer process, and of this load generator (which shares the machine's cores).
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import orjson

from bench.turns import cpu_s, own_cpu_s
from bench.turns import window as window_of
from plumbing.ids import new_id
from tests.harness import DaemonProcess, writer_pid
from wire.client import BrokerClient

SENDERS = 500


def frame(conn_no: int, i: int) -> bytes:
    return (
        orjson.dumps(
            {
                "type": "inbound",
                "req": str(i),
                "msg_id": f"c{conn_no}-{i}",
                "sender_id": f"user-{(i * 7 + conn_no) % SENDERS}",
                "peer_kind": "dm",
                "text": f"message {i} from connection {conn_no}: the quick brown fox",
                "queue_mode": "collect",
            }
        )
        + b"\n"
    )


async def closed_loop(
    sock: Path, conns: int, per_conn: int, window: int, tag: str
) -> tuple[float, list[float]]:
    latencies: list[float] = []

    async def one(conn_no: int) -> None:
        async with await BrokerClient.connect(sock, role="adapter", channel=f"bench{tag}") as c:
            sent_at: dict[str, float] = {}
            frames = [frame(conn_no, i) for i in range(per_conn)]
            acked = 0
            in_flight = window_of(window)

            async def reader() -> None:
                nonlocal acked
                while acked < per_conn:
                    f = await c.recv()
                    if f["type"] != "ack":
                        raise RuntimeError(f"unexpected frame {f}")
                    latencies.append(time.perf_counter() - sent_at.pop(f["req"]))
                    acked += 1
                    in_flight.release()

            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                chunk = 32
                for start in range(0, per_conn, chunk):
                    batch = frames[start : start + chunk]
                    for _ in batch:
                        await in_flight.acquire()
                    now = time.perf_counter()
                    for i in range(start, start + len(batch)):
                        sent_at[str(i)] = now
                    await c.send_raw(b"".join(batch))

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for n in range(conns):
            tg.start_soon(one, n)
    elapsed = time.perf_counter() - t0
    return conns * per_conn / elapsed, latencies


async def offered_rate(sock: Path, conns: int, rate: int, seconds: float) -> list[float]:
    latencies: list[float] = []
    per_conn_rate = rate / conns
    total_per_conn = int(per_conn_rate * seconds)

    async def one(conn_no: int) -> None:
        async with await BrokerClient.connect(sock, role="adapter", channel="rate") as c:
            sent_at: dict[str, float] = {}

            async def reader() -> None:
                for _ in range(total_per_conn):
                    f = await c.recv()
                    latencies.append(time.perf_counter() - sent_at.pop(f["req"]))

            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                start = time.perf_counter()
                for i in range(total_per_conn):
                    due = start + i / per_conn_rate
                    delay = due - time.perf_counter()
                    if delay > 0:
                        await anyio.sleep(delay)
                    sent_at[str(i)] = time.perf_counter()
                    await c.send_raw(frame(conn_no + 100, i))

    async with anyio.create_task_group() as tg:
        for n in range(conns):
            tg.start_soon(one, n)
    return latencies


def sqlite_ceiling(path: Path, synchronous: str, total: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.executescript(
        "CREATE TABLE inbound (id INTEGER PRIMARY KEY, channel TEXT NOT NULL, msg_id TEXT NOT NULL,"
        " item_id TEXT NOT NULL, session_label TEXT NOT NULL, sender_id TEXT NOT NULL,"
        " peer_kind TEXT, peer_id TEXT, text TEXT NOT NULL, received_at INTEGER,"
        " UNIQUE (channel, msg_id));"
        "CREATE TABLE queue_items (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,"
        " session_label TEXT NOT NULL, source TEXT, inbound_id INTEGER, status TEXT,"
        " created_at INTEGER);"
        "CREATE INDEX q_open ON queue_items(session_label, seq) WHERE status = 'queued';"
        "CREATE INDEX q_s ON queue_items(session_label, seq);"
    )
    t0 = time.perf_counter()
    for start in range(0, total, 100):
        conn.execute("BEGIN")
        for i in range(start, min(start + 100, total)):
            item = new_id()
            label = f"dm:ent_{i % SENDERS}"
            cur = conn.execute(
                "INSERT INTO inbound (channel, msg_id, item_id, session_label, sender_id,"
                " peer_kind, peer_id, text, received_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    "bench",
                    f"m{i}",
                    item,
                    label,
                    f"user-{i % SENDERS}",
                    "dm",
                    f"user-{i % SENDERS}",
                    f"message {i}: the quick brown fox",
                    0,
                ),
            )
            conn.execute(
                "INSERT INTO queue_items (id, session_label, source, inbound_id, status,"
                " created_at) VALUES (?, ?, 'person', ?, 'queued', 0)",
                (item, label, cur.lastrowid),
            )
        conn.execute("COMMIT")
    rate = total / (time.perf_counter() - t0)
    conn.close()
    return rate


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] * 1000


def latency_at(sock: Path, args: argparse.Namespace) -> list[float]:
    return anyio.run(
        offered_rate,
        sock,
        args.connections,
        args.rate,
        args.seconds,
        backend_options={"use_uvloop": True},
    )


def run_mode(sync: str, args: argparse.Namespace) -> dict[str, Any]:
    # Turns are held back (collect with a long quiet period) so that this
    # measures ingest alone; bench.turns measures turns.
    config = {
        "log_level": "warning",
        "ledger": {"synchronous": sync, "writer": args.writer}
        | ({"key_file": args.key_file} if args.key_file else {}),
        "max_inflight": max(args.window * 2, 1024),
        "queue": {"debounce_ms": 600_000, "cap": 10_000_000},
    }
    # The latency at the offered rate, on a daemon that has done nothing else.
    with tempfile.TemporaryDirectory() as tmp, DaemonProcess(Path(tmp), config) as daemon:
        fresh = latency_at(daemon.socket, args)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with DaemonProcess(work, config) as daemon:
            assert daemon.proc is not None
            per_conn = args.messages // args.connections
            writer = anyio.run(writer_pid, daemon.socket)
            cpu_before = cpu_s(daemon.proc.pid)
            writer_before = cpu_s(writer) if writer else 0.0
            client_before = own_cpu_s()
            rate, lat = anyio.run(
                closed_loop,
                daemon.socket,
                args.connections,
                per_conn,
                args.window,
                sync.lower(),
                backend_options={"use_uvloop": True},
            )
            total = per_conn * args.connections
            cpu_us = (cpu_s(daemon.proc.pid) - cpu_before) / total * 1e6
            writer_us = (cpu_s(writer) - writer_before) / total * 1e6 if writer else 0.0
            client_us = (own_cpu_s() - client_before) / total * 1e6
            # Again after the closed loop: every one of its messages is still held
            # in memory by its session's collect backlog, which no real load leaves.
            after = latency_at(daemon.socket, args)
        ceiling = sqlite_ceiling(work / "ceiling.db", sync, args.messages)
    return {
        "sync": sync,
        "rate": rate,
        "p50": pct(lat, 50),
        "p99": pct(lat, 99),
        "offered_p50": pct(fresh, 50),
        "offered_p99": pct(fresh, 99),
        "after_p99": pct(after, 99),
        "ceiling": ceiling,
        "cpu_us": cpu_us,
        "writer_us": writer_us,
        "client_us": client_us,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--window", type=int, default=256, help="un-acked frames per connection")
    parser.add_argument("--rate", type=int, default=5000, help="offered msg/s for the latency run")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--modes", default="NORMAL,FULL")
    parser.add_argument(
        "--writer",
        choices=("process", "thread"),
        default="process",
        help="ledger.writer",
    )
    parser.add_argument("--key-file", default="", help="ledger.key_file: an encrypted ledger")
    args = parser.parse_args()
    print(
        f"{args.messages} messages over {args.connections} connections, window {args.window}; "
        f"latency run at {args.rate} msg/s for {args.seconds}s"
    )
    print(
        f"{'sync':<7}{'acked/s':>10}{'p50 ms':>9}{'p99 ms':>9}   {'@rate p50':>10}{'p99 ms':>9}"
        f"{'p99 after':>11}   {'sqlite3 ceiling/s':>18}{'ratio':>7}   "
        f"CPU µs/msg: {'daemon':>6}{'writer':>7}{'client':>7}"
    )
    for sync in args.modes.split(","):
        r = run_mode(sync.strip().upper(), args)
        print(
            f"{r['sync']:<7}{r['rate']:>10.0f}{r['p50']:>9.2f}{r['p99']:>9.2f}   "
            f"{r['offered_p50']:>10.2f}{r['offered_p99']:>9.2f}{r['after_p99']:>11.2f}   "
            f"{r['ceiling']:>18.0f}"
            f"{r['rate'] / r['ceiling']:>7.2f}{'':>15}"
            f"{r['cpu_us']:>6.0f}{r['writer_us']:>7.0f}{r['client_us']:>7.0f}"
        )


if __name__ == "__main__":
    main()
