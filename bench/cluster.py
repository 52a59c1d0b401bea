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
from pathlib import Path
from typing import Any

import anyio

from bench.runtime_cpu import drive
from broker.runtime.temporal.devserver import DevServer
from tests.cluster import Cluster
from tests.harness import DaemonProcess

BASE: dict[str, Any] = {
    "log_level": "warning",
    "queue": {"debounce_ms": 0},
    "engine": {"chunks": 1},
}


async def embedded(args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory(prefix="bcl-", dir="/tmp") as tmp:
        d = DaemonProcess(Path(tmp), BASE).start()
        try:
            assert d.proc is not None
            return await drive(
                d.socket, {"broker": d.proc.pid}, args.sessions, args.turns, args.rate
            )
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
            socket = cluster.nodes[0].socket
            return await drive(socket, pids, args.sessions, args.turns, args.rate)
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
