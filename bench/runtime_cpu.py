"""CPU a turn on the local runtime and on the Temporal runtime, one node.

    .venv/bin/python -m bench.runtime_cpu [--sessions 50] [--per-session 10]
        [--runtime KEY=VALUE ...] [--temporal-only]

Each runtime gets a daemon of its own (echo engine, chunks=1) and one adapter that
confirms every `deliver` as it comes (bench/turns.py `Adapters`): every session is
warmed with one turn, then `--per-session` followup messages go to each session,
round robin, and the run ends when every reply came. It reports turns/s and the
CPU seconds a turn of the broker (daemon and its writer) and, for Temporal, of the
dev server it starts (`devserver.py`). `--runtime workflow_sandbox=false` sets a key of
the Temporal node's `[runtime]` (the value read as JSON, else as a string).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench.turns import Adapters, pct
from broker.runtime.temporal.devserver import DevServer
from tests.harness import DaemonProcess
from tests.temporal_runtime import runtime_config

WARM_WITHIN_S = 120.0
RUN_WITHIN_S = 600.0


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of `pid` and its children, alive and reaped."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])
    total = ticks / os.sysconf("SC_CLK_TCK")
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return total + sum(cpu_s(int(c)) for c in children)


async def drive(
    socket: Path, pids: dict[str, int], sessions: int, turns: int, rate: float | None
) -> str:
    """Warm `sessions` with a turn each, then send `turns` followup messages round
    robin (paced at `rate` a second, or all at once); turns/s, send->deliver p50/p99
    and the CPU ms a turn of each process in `pids`."""
    ads = Adapters(socket, anyio.Semaphore(1 << 30))
    prefix = os.urandom(3).hex()
    async with anyio.create_task_group() as tg:
        await ads.open(tg, 1)
        await ads.send_inbound(0, ((f"w{prefix}{n}", n) for n in range(sessions)))
        await ads.wait_delivered(sessions, within_s=WARM_WITHIN_S)
        cpu0 = {name: cpu_s(pid) for name, pid in pids.items()}
        began = time.perf_counter()
        for n in range(turns):
            if rate is not None:
                delay = began + n / rate - time.perf_counter()
                if delay > 0:
                    await anyio.sleep(delay)
            msg_id = f"t{prefix}{n}"
            ads.sent_at[msg_id] = time.perf_counter()
            await ads.send_inbound(0, [(msg_id, n % sessions)])
        # A message answered `overloaded` (a hand-off slower than its bound) is not
        # sent again: it is counted, and the run ends without its reply.
        await ads._wait(
            lambda: ads.expected_delivered + len(ads.errors) >= sessions + turns, RUN_WITHIN_S
        )
        cpu = {name: cpu_s(pid) - cpu0[name] for name, pid in pids.items()}
        await ads.close()
        tg.cancel_scope.cancel()
    latencies = [ads.delivered_at[m] - t for m, t in ads.sent_at.items() if m in ads.delivered_at]
    missing = turns - len(latencies) - len(ads.errors)
    if missing > 0:
        raise RuntimeError(f"{missing} replies missing")
    wall = max(ads.delivered_at.values()) - began
    served = len(latencies)
    return "; ".join(
        [
            f"{served} turns in {wall:.1f} s = {served / wall:.0f} turns/s",
            f"{len(ads.errors)} refused {sorted({str(e.get('code')) for e in ads.errors})}",
            f"send->deliver p50 {pct(latencies, 50):.0f} ms p99 {pct(latencies, 99):.0f} ms",
            "CPU ms a turn: " + ", ".join(f"{k} {1000 * v / served:.2f}" for k, v in cpu.items()),
        ]
    )


async def run(config: dict[str, Any], args: argparse.Namespace, server: int | None) -> str:
    with tempfile.TemporaryDirectory(prefix="bc-", dir="/tmp") as tmp:
        d = DaemonProcess(Path(tmp), config).start()
        try:
            assert d.proc is not None
            pids = {"broker": d.proc.pid} | ({"temporal": server} if server else {})
            turns = args.sessions * args.per_session
            return await drive(d.socket, pids, args.sessions, turns, None)
        finally:
            d.kill()


def runtime_key(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--per-session", type=int, default=10)
    parser.add_argument("--runtime", type=runtime_key, action="append", default=[])
    parser.add_argument("--temporal-only", action="store_true")
    args = parser.parse_args()
    base = {"log_level": "warning", "queue": {"debounce_ms": 0}, "engine": {"chunks": 1}}
    if not args.temporal_only:
        print("local:   ", anyio.run(run, base, args, None), flush=True)
    with tempfile.TemporaryDirectory(prefix="bct-", dir="/tmp") as tmp:
        server = DevServer(Path(tmp)).start()
        try:
            assert server.proc is not None
            config = {**base, "runtime": runtime_config(server.address) | dict(args.runtime)}
            print("temporal:", anyio.run(run, config, args, server.proc.pid), flush=True)
        finally:
            server.stop()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
