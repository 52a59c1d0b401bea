"""A whole broker turn through the `openai-agents` engine against the SDK's own
`Runner.run` with its `SQLiteSession`, on the same fake model: CPU per turn.

    .venv/bin/python -m bench.agents_turn [--sessions 20] [--seconds 10]

Broker: bench.realistic's closed loop (every session has one message outstanding)
on a daemon whose engine is the agent of tests/integration/sdk_agent.py, on the
SDK's ScriptedModel answering at once; per turn, the CPU of the daemon and its
writer process: ingest, context, the SDK's run, the commit, the reply.
SDK: the same agent and model in this process, `Runner.run(agent, text,
session=SQLiteSession(...))` for as many turns over as many sessions, one after
another; per turn, this process's CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench.realistic import closed_loop
from tests.harness import DaemonProcess

AGENT = Path(__file__).parents[1] / "tests" / "integration" / "sdk_agent.py"


def broker(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ba-", dir="/tmp") as tmp:
        folder = Path(tmp)
        for path in (AGENT, AGENT.parent / "agent_rules.py"):  # the agent and what it imports
            shutil.copy(path, folder / path.name)
        config = {
            "log_level": "warning",
            "max_inflight": 4096,
            "engine": {"kind": "openai-agents", "agent": "sdk_agent:agent"},
            "queue": {"cap": 1_000_000, "debounce_ms": 0, "idle_stop_s": 60.0},
        }
        with DaemonProcess(folder, config) as daemon:
            return anyio.run(
                lambda: closed_loop(daemon, args), backend_options={"use_uvloop": True}
            )


def sdk(turns: int, sessions: int) -> float:
    """CPU µs per turn of Runner.run with SQLiteSession, in this process."""
    sys.path.insert(0, str(AGENT.parent))
    import sdk_agent  # type: ignore[import-not-found]
    from agents import Runner, SQLiteSession
    from agents.run_config import RunConfig

    config = RunConfig(tracing_disabled=True)

    async def main() -> float:
        with tempfile.TemporaryDirectory(prefix="bs-", dir="/tmp") as tmp:
            db = str(Path(tmp) / "sessions.db")
            stores = [SQLiteSession(f"s{i}", db) for i in range(sessions)]
            for i in range(sessions):  # warm up, as the broker's loop does
                await Runner.run(sdk_agent.agent, f"warm{i}", session=stores[i], run_config=config)
            cpu0 = time.process_time()
            for i in range(turns):
                store = stores[i % sessions]
                await Runner.run(sdk_agent.agent, f"c{i}", session=store, run_config=config)
            return (time.process_time() - cpu0) / turns * 1e6

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    ours = broker(args)
    theirs = sdk(ours["turns"], args.sessions)
    total = ours["daemon_us"] + ours["writer_us"]
    print(f"{args.sessions} sessions, {ours['turns']} turns on each side")
    print(f"  broker turn, openai-agents engine: daemon {ours['daemon_us']:.0f} + writer"
          f" {ours['writer_us']:.0f} = {total:.0f} µs CPU per turn ({ours['tps']:.0f} turns/s,"
          f" errors {ours['errors']})")  # fmt: skip
    print(f"  SDK Runner.run + SQLiteSession:    {theirs:.0f} µs CPU per turn")
    print(f"  ratio: {total / theirs:.2f}x")


if __name__ == "__main__":
    main()
