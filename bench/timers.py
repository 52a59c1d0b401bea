"""Timer benchmark: 10,000 timers all due at the same moment.

    .venv/bin/python -m bench.timers [--timers 10000] [--sessions 100]
                                     [--connections 8] [--lead-s 30]

A real daemon (echo engine, writer process). `--connections` operator
connections add the timers with `timer.add` (`at` = one shared due time
`--lead-s` seconds after the start, spread over `--sessions` system sessions),
each waiting for its answer before the next: the p50/p99 of those round trips
is timer.add's latency. Then it watches the ledger (a read-only connection,
every 5 ms) until all firings are committed, and prints how long after the due
time the last one was seen committed (an upper bound, within 5 ms) and what the
wheel's own clock said when it fired the last batch. Aim: within 1 s. The
fired items go on to run as turns meanwhile, as they would in production.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from tests.harness import DaemonProcess
from wire.client import BrokerClient


def config() -> dict[str, Any]:
    return {
        "log_level": "warning",
        "engine": {"kind": "echo", "delay_ms": 0, "chunks": 1},
        "queue": {"cap": 1_000_000, "idle_stop_s": 30},
    }


async def add_all(d: DaemonProcess, args: argparse.Namespace, due_at: str) -> list[float]:
    latencies: list[float] = []
    per_conn = args.timers // args.connections

    async def adder(conn_no: int) -> None:
        async with await BrokerClient.connect(d.socket) as c:
            for k in range(per_conn):
                n = conn_no * per_conn + k
                started = time.perf_counter()
                await c.op(
                    "timer.add",
                    session=f"system:bench-{n % args.sessions}",
                    text=f"timer {n}",
                    at=due_at,
                )
                latencies.append(time.perf_counter() - started)

    async with anyio.create_task_group() as tg:
        for conn_no in range(args.connections):
            tg.start_soon(adder, conn_no)
    return latencies


def count_fired(d: DaemonProcess) -> tuple[int, int | None]:
    with d.db() as db:
        count, last = db.execute("SELECT count(*), max(fired_at) FROM timer_firings").fetchone()
    return int(count), last


async def run(d: DaemonProcess, args: argparse.Namespace) -> None:
    due_ms = (time.time_ns() // 1_000_000) + int(args.lead_s * 1000)
    due_at = datetime.fromtimestamp(due_ms / 1000, UTC).isoformat(timespec="milliseconds")
    added_from = time.monotonic()
    latencies = await add_all(d, args, due_at)
    added_s = time.monotonic() - added_from
    total = len(latencies)
    wait_s = due_ms / 1000 - time.time()
    print(
        f"timer.add: {total} in {added_s:.1f} s over {args.connections} connections;"
        f" p50 {statistics.median(latencies) * 1000:.2f} ms,"
        f" p99 {statistics.quantiles(latencies, n=100)[98] * 1000:.2f} ms"
    )
    if wait_s < 0:
        print(f"the adds ran {-wait_s:.1f} s past the due time: raise --lead-s")
    else:
        await anyio.sleep(wait_s)
    with anyio.fail_after(args.lead_s + 120):
        while (fired := count_fired(d))[0] < total:  # noqa: ASYNC110 - another process's ledger
            await anyio.sleep(0.005)
    seen_ms = time.time_ns() // 1_000_000
    wheel_ms = fired[1] or 0
    print(
        f"{total} timers due at once: the last item committed at most"
        f" {(seen_ms - due_ms) / 1000:.3f} s after the due time"
        f" (the wheel fired its last batch at +{(wheel_ms - due_ms) / 1000:.3f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--timers", type=int, default=10_000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--lead-s", type=float, default=30.0, help="due this long after start")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="btm-", dir="/tmp") as tmp,
        DaemonProcess(Path(tmp), config()) as daemon,
    ):

        async def body() -> None:
            await run(daemon, args)

        anyio.run(body)


if __name__ == "__main__":
    main()
