"""CPU per turn of the python engine against the subprocess engine, same reply logic.

    .venv/bin/python -m bench.engines [--sessions 100] [--seconds 10] [--chunks 8] [--chunk-ms 4]

bench.realistic's closed loop (every session has one message outstanding at all
times) on two daemons, one with `kind = "python"` and one with `kind = "subprocess"`,
both running bench/reply_logic.py: the inputs joined, in `--chunks` deltas
`--chunk-ms` apart. The CPU per turn counts the daemon, its writer process, and,
for the subprocess engine, the programs it started (their CPU is the daemon's
children's, read once they are reaped).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from bench.realistic import closed_loop
from tests.harness import DaemonProcess

HERE = Path(__file__).parent


def children_cpu_s(pid: int) -> float:
    """CPU seconds of the reaped children of a process (cutime + cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def engine_config(kind: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    if kind == "python":
        return {"kind": "python", "entry": "reply_logic:make",
                "reply_chunks": args.chunks, "reply_chunk_ms": args.chunk_ms}  # fmt: skip
    script = str(folder / "reply_logic.py")
    return {"kind": "subprocess",
            "command": [sys.executable, script, str(args.chunks), str(args.chunk_ms)]}  # fmt: skip


def run(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="be-", dir="/tmp") as tmp:
        folder = Path(tmp)
        shutil.copy(HERE / "reply_logic.py", folder / "reply_logic.py")
        config = {
            "log_level": "warning",
            "max_inflight": 4096,
            "engine": engine_config(kind, folder, args),
            "queue": {"cap": 1_000_000, "debounce_ms": 0, "idle_stop_s": 60.0},
        }
        with DaemonProcess(folder, config) as daemon:
            assert daemon.proc is not None
            pid = daemon.proc.pid

            async def main() -> dict[str, Any]:
                kids0 = children_cpu_s(pid)
                result = await closed_loop(daemon, args)
                result["children_us"] = (
                    (children_cpu_s(pid) - kids0) / max(1, result["turns"]) * 1e6
                )
                return result

            return anyio.run(main, backend_options={"use_uvloop": True})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--chunk-ms", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    print(f"{args.sessions} sessions, one message outstanding each, {args.seconds:g} s;"
          f" replies in {args.chunks} deltas {args.chunk_ms} ms apart")  # fmt: skip
    for kind in ("python", "subprocess"):
        r = run(kind, args)
        total = r["daemon_us"] + r["writer_us"] + r["children_us"]
        print(f"{kind:>10}: {r['tps']:7.0f} turns/s ({r['turns']} turns)   CPU per turn:"
              f" daemon {r['daemon_us']:6.0f} + writer {r['writer_us']:5.0f}"
              f" + engine processes {r['children_us']:7.0f} = {total:7.0f} µs"
              f"   p50 {r['p50']:.1f} ms  errors {r['errors']}")  # fmt: skip


if __name__ == "__main__":
    main()
