"""CPU a turn on the local runtime and on the Temporal runtime, one node.

    .venv/bin/python -m bench.runtime_cpu [--sessions 50] [--per-session 10]

Each runtime gets a daemon of its own (echo engine, chunks=1) and one adapter:
every session is warmed with one turn, then `--per-session` followup messages
go to each session, round robin, and the run ends when every reply came. It
reports turns/s and the CPU seconds a turn of the broker (daemon and its
writer) and, for Temporal, of the dev server it starts (`devserver.py`).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from broker.runtime.temporal.devserver import DevServer
from tests.harness import DaemonProcess
from tests.integration.wire import Adapter, uniq
from tests.temporal_runtime import runtime_config


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of `pid` and its children, alive and reaped."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])
    total = ticks / os.sysconf("SC_CLK_TCK")
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return total + sum(cpu_s(int(c)) for c in children)


async def run(config: dict[str, Any], args: argparse.Namespace, server: int | None) -> str:
    with tempfile.TemporaryDirectory(prefix="bc-", dir="/tmp") as tmp:
        d = DaemonProcess(Path(tmp), config).start()
        try:
            assert d.proc is not None
            async with await Adapter.connect(d, "bench") as a:
                senders = [uniq("u") for _ in range(args.sessions)]
                for sender in senders:
                    msg = uniq("m")
                    await a.send_inbound(msg, "warm", sender, mode="followup")
                    await a.deliver(msg_id=msg, within=120)
                broker0 = cpu_s(d.proc.pid)
                server0 = cpu_s(server) if server else 0.0
                began = time.monotonic()
                sent = []
                for _ in range(args.per_session):
                    for sender in senders:
                        msg = uniq("m")
                        sent.append(msg)
                        await a.send_inbound(msg, "hi", sender, mode="followup")
                for msg in sent:
                    await a.deliver(msg_id=msg, within=600)
                wall = time.monotonic() - began
                broker = cpu_s(d.proc.pid) - broker0
                served = cpu_s(server) - server0 if server else 0.0
        finally:
            d.kill()
    n = len(sent)
    line = f"{n} turns in {wall:.1f} s = {n / wall:.0f} turns/s; broker {1000 * broker / n:.2f}"
    if server:
        line += f" + Temporal server {1000 * served / n:.2f}"
    return line + " ms CPU a turn"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--per-session", type=int, default=10)
    args = parser.parse_args()
    base = {"log_level": "warning", "queue": {"debounce_ms": 0}, "engine": {"chunks": 1}}
    print("local:   ", anyio.run(run, base, args, None))
    with tempfile.TemporaryDirectory(prefix="bct-", dir="/tmp") as tmp:
        server = DevServer(Path(tmp)).start()
        try:
            assert server.proc is not None
            config = {**base, "runtime": runtime_config(server.address)}
            print("temporal:", anyio.run(run, config, args, server.proc.pid))
        finally:
            server.stop()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
