"""Instructions per ingested message and per turn, counted by callgrind.

    .venv/bin/python -m bench.instructions [--messages 3000] [--turns 2000] [--sessions 100]
                                           [--chunks 1] [--chunk-ms 0]

Rates and CPU times on a shared 2-core VM move by 30% between identical runs
(other guests take the CPU: "steal"), so they cannot tell a 3% change from
noise. Instructions executed can: this runs the daemon and its ledger writer
process under `valgrind --tool=callgrind` and prints, per process, the
instructions executed per message, which repeat to within a fraction of a
percent. Compare two versions with it (a `git worktree` of the old one, run
with PYTHONPATH pointing there).

Each workload runs twice, short and long; the difference of the counts over the
difference of the messages cancels start-up and warm-up:
- ingest: closed loop, 8 adapter connections, the messages of bench.ingest
  (collect mode with a long debounce, so no turns run).
- turns: bench.turns' throughput part, echo engine, one message a turn over
  `--sessions` sessions; `--chunks 8 --chunk-ms 4` streams each reply as
  bench.realistic's engine does.

Needs valgrind; Python runs about 50x slower under it, so this takes minutes.
Under valgrind every batch is smaller than at full speed, so the figures are
closer to a lightly loaded daemon than to the closed-loop rates of the other
benches. The turns figure repeated within 2% (daemon) and 5% (writer) over three
runs. The ingest figure depends on how the pipelined batches formed and moved
by up to 30% between runs of the same code: trust it only for large changes.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from bench.ingest import closed_loop
from bench.turns import daemon_config, throughput
from tests.harness import DaemonProcess, writer_pid

CALLGRIND = [
    "valgrind",
    "--tool=callgrind",
    "--callgrind-out-file=/dev/null",
    "--trace-children=yes",
]
COLLECTED = re.compile(r"==(\d+)== Collected : (\d+)")
CONNECTIONS = 8


def counted(
    config: dict[str, Any], body: Callable[[DaemonProcess], Awaitable[object]]
) -> tuple[int, int]:
    """Instructions of (the daemon, its writer process) over a whole run of `body`."""
    with tempfile.TemporaryDirectory(prefix="bi-", dir="/tmp") as tmp:
        daemon = DaemonProcess(Path(tmp), config, wrapper=CALLGRIND)
        daemon.start(timeout=600)
        try:
            writer = anyio.run(writer_pid, daemon.socket)
            anyio.run(body, daemon, backend_options={"use_uvloop": True})
            daemon.terminate(timeout=600)
        finally:
            daemon.kill()
        totals = {int(pid): int(n) for pid, n in COLLECTED.findall(daemon.log())}
    assert daemon.proc is not None
    if daemon.proc.pid not in totals or writer not in totals:
        raise RuntimeError(f"no callgrind totals in the daemon log:\n{daemon.log()[-3000:]}")
    return totals[daemon.proc.pid], totals[writer]


def ingest_run(messages: int) -> tuple[int, int]:
    config = {
        "log_level": "warning",
        "max_inflight": 1024,
        "queue": {"debounce_ms": 600_000, "cap": 10_000_000},
    }

    async def body(daemon: DaemonProcess) -> None:
        await closed_loop(daemon.socket, CONNECTIONS, messages // CONNECTIONS, 256, "ins")

    return counted(config, body)


def turns_run(messages: int, sessions: int, chunks: int = 1, chunk_ms: int = 0) -> tuple[int, int]:
    args = argparse.Namespace(
        messages=messages, sessions=sessions, connections=4, window=512, writer="process"
    )
    config = daemon_config(args, 0, 600.0)
    config["engine"] = {"kind": "echo", "chunks": chunks, "delay_ms": chunk_ms}

    async def body(daemon: DaemonProcess) -> None:
        result = await throughput(daemon, args)
        if result["errors"]:
            raise RuntimeError(f"{result['errors']} turns failed")

    return counted(config, body)


def per_message(short: tuple[int, int], long: tuple[int, int], extra: int) -> tuple[float, float]:
    return (long[0] - short[0]) / extra, (long[1] - short[1]) / extra


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=3000, help="ingest: the long run")
    parser.add_argument("--turns", type=int, default=2000, help="turns: the long run")
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--parts", default="ingest,turns")
    parser.add_argument("--chunks", type=int, default=1, help="turns: deltas a reply")
    parser.add_argument("--chunk-ms", type=int, default=0, help="turns: ms between deltas")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("bench.instructions needs valgrind (Debian package valgrind)")
    print(f"{'workload':<9}{'counted over':>16}{'daemon instr':>15}{'writer instr':>15}")
    parts = args.parts.split(",")
    if "ingest" in parts:
        short_n = (args.messages // 4) // CONNECTIONS * CONNECTIONS
        long_n = args.messages // CONNECTIONS * CONNECTIONS
        daemon, writer = per_message(ingest_run(short_n), ingest_run(long_n), long_n - short_n)
        print(f"{'ingest':<9}{f'{long_n - short_n} messages':>16}{daemon:>15,.0f}{writer:>15,.0f}")
    if "turns" in parts:
        short_n = args.turns // 4
        long_n = args.turns
        short = turns_run(short_n, args.sessions, args.chunks, args.chunk_ms)
        long = turns_run(long_n, args.sessions, args.chunks, args.chunk_ms)
        daemon, writer = per_message(short, long, long_n - short_n)
        print(f"{'turns':<9}{f'{long_n - short_n} turns':>16}{daemon:>15,.0f}{writer:>15,.0f}")
    print("(instructions per message or turn: the long run's count minus the short one's)")


if __name__ == "__main__":
    main()
