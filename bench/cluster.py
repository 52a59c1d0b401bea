"""Turns/s, send-to-deliver latency and CPU a turn of 1, 2 and 3 broker nodes on one
PostgreSQL ledger and one Temporal dev server, beside the embedded default.

    .venv/bin/python -m bench.cluster [--nodes 1,2,3] [--sessions 50] [--turns 500]
                                      [--rate 100]

Each configuration gets fresh daemons (echo engine, chunks=1) and one adapter on
the first node. Every session is warmed with one turn; then `--turns` followup
messages go to the sessions round robin, paced at `--rate` a second, and the run
ends when every reply came. It reports the turns/s served, the p50/p99 from a
message's send to its `deliver` at the adapter, and the CPU seconds a turn of each
broker node (daemon and writer), of the Temporal dev server and of PostgreSQL.
This is a benchmark, not a test: the machine is shared, read the load average.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench.runtime_cpu import cpu_s
from broker.runtime.temporal.devserver import DevServer
from tests.cluster import Cluster
from tests.harness import DaemonProcess
from tests.integration.wire import Adapter, Frame, uniq

BASE: dict[str, Any] = {
    "log_level": "warning",
    "queue": {"debounce_ms": 0},
    "engine": {"chunks": 1},
}


class TimedAdapter(Adapter):
    """Stamps each frame with the time it was read."""

    async def _read(self) -> Frame:
        frame = await super()._read()
        frame["_at"] = time.monotonic()
        return frame


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


async def drive(first: DaemonProcess, pids: dict[str, int], args: argparse.Namespace) -> str:
    async with await TimedAdapter.connect(first, "bench") as a:
        senders = [uniq("u") for _ in range(args.sessions)]
        for sender in senders:
            msg = uniq("m")
            await a.send_inbound(msg, "warm", sender, mode="followup")
            await a.deliver(msg_id=msg, within=120)
        cpu0 = {name: cpu_s(pid) for name, pid in pids.items()}
        began = time.monotonic()
        sent_at: dict[str, float] = {}
        for n in range(args.turns):
            due = began + n / args.rate
            if due > time.monotonic():
                await anyio.sleep(due - time.monotonic())
            msg = uniq("m")
            sent_at[msg] = time.monotonic()
            await a.send_inbound(msg, "hi", senders[n % len(senders)], mode="followup")
        latencies = []
        for msg, at in sent_at.items():
            frame = await a.deliver(msg_id=msg, within=600)
            await a.confirm(frame["out_id"])
            latencies.append(frame["_at"] - at)
        wall = max(at + lat for at, lat in zip(sent_at.values(), latencies, strict=True)) - began
        cpu = {name: cpu_s(pid) - cpu0[name] for name, pid in pids.items()}
    n = len(sent_at)
    parts = [
        f"{n} turns in {wall:.1f} s = {n / wall:.0f} turns/s",
        f"send->deliver p50 {1000 * percentile(latencies, 0.5):.0f} ms"
        f" p99 {1000 * percentile(latencies, 0.99):.0f} ms",
        "CPU ms a turn: " + ", ".join(f"{k} {1000 * v / n:.2f}" for k, v in cpu.items()),
    ]
    return "; ".join(parts)


async def embedded(args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory(prefix="bcl-", dir="/tmp") as tmp:
        d = DaemonProcess(Path(tmp), BASE).start()
        try:
            assert d.proc is not None
            return await drive(d, {"broker": d.proc.pid}, args)
        finally:
            d.kill()


async def clustered(
    size: int, dsn: str, server: DevServer, pg_pid: int, args: argparse.Namespace
) -> str:
    with tempfile.TemporaryDirectory(prefix="bcl-", dir="/tmp") as tmp:
        cluster = Cluster(Path(tmp), dsn, server.address, size, BASE).start()
        try:
            pids = {f"node{k}": n.proc.pid for k, n in enumerate(cluster.nodes) if n.proc}
            assert server.proc is not None
            pids["temporal"] = server.proc.pid
            pids["postgres"] = pg_pid
            return await drive(cluster.nodes[0], pids, args)
        finally:
            cluster.stop()


def main() -> None:
    from ledger.postgres import devcluster

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", default="1,2,3")
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--rate", type=float, default=100.0)
    args = parser.parse_args()
    print(f"embedded: {anyio.run(embedded, args)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bcs-", dir="/tmp") as tmp:
        server = DevServer(Path(tmp)).start()
        pg = devcluster.create(durable=True)
        try:
            pg_pid = int((pg.data / "postmaster.pid").read_text().split()[0])
            template = devcluster.template_database(pg)
            for size in (int(x) for x in args.nodes.split(",")):
                dsn = devcluster.fresh_database(pg, f"bench{size}", template)
                line = anyio.run(clustered, size, dsn, server, pg_pid, args)
                print(f"{size} node(s): {line}", flush=True)
        finally:
            server.stop()
            pg.destroy()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
