"""What a clustered turn asks of Temporal, against the floor's turn: history events a
turn, by type, in every run of the sessions' workflows.

    .venv/bin/python -m bench.temporal_shape [--sessions 20] [--per-session 20]
        [--runtime KEY=VALUE ...]

One dev server; first our node (`bench.runtime_cpu`'s daemon and drive: every session
warmed with a turn, then `--per-session` followups each), then the floor node
(`bench.temporal_floor`) with as many turns. Then every run of each workflow type is
read back (`fetch_history`) and its events counted: workflow tasks, activities, the
markers of patches and local activities, search attributes, timers, continue-as-new.
A count, not a timing: the machine's load does not change it much (how many arrivals
share a workflow task does). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import collections
import tempfile
from pathlib import Path
from typing import Any

import anyio
from temporalio.client import Client

from bench.runtime_cpu import drive, runtime_key
from bench.temporal_floor import floor_run
from broker.runtime.temporal.devserver import NAMESPACE, DevServer
from tests.harness import DaemonProcess
from tests.temporal_runtime import runtime_config


async def events(address: str, workflow_type: str) -> tuple[collections.Counter[str], int, int]:
    """Each event type's count over every run of `workflow_type`, the runs, the bytes."""
    client = await Client.connect(address, namespace=NAMESPACE)
    counts: collections.Counter[str] = collections.Counter()
    runs = size = 0
    async for run in client.list_workflows(f"WorkflowType = '{workflow_type}'"):
        runs += 1
        history = await client.get_workflow_handle(run.id, run_id=run.run_id).fetch_history()
        for event in history.events:
            counts[str(event.WhichOneof("attributes")).removesuffix("_event_attributes")] += 1
            size += event.ByteSize()
    return counts, runs, size


def show(title: str, found: tuple[collections.Counter[str], int, int], turns: int) -> None:
    counts, runs, size = found
    print(f"{title}: {runs} runs, {turns} turns, {size / turns:.0f} history bytes a turn")
    for name, count in counts.most_common():
        print(f"    {count / turns:6.2f} {name}")
    print(f"    {sum(counts.values()) / turns:6.2f} events a turn in all")


async def ours(args: argparse.Namespace, server: DevServer) -> None:
    base = {"log_level": "warning", "queue": {"debounce_ms": 0}, "engine": {"chunks": 1}}
    config: dict[str, Any] = {
        **base,
        "runtime": runtime_config(server.address) | dict(args.runtime),
    }
    with tempfile.TemporaryDirectory(prefix="bts-", dir="/tmp") as tmp:
        d = DaemonProcess(Path(tmp), config).start()
        try:
            assert d.proc is not None
            turns = args.sessions * args.per_session
            print("node: ", await drive(d.socket, {"node": d.proc.pid}, args.sessions, turns, None))
        finally:
            d.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--per-session", type=int, default=20)
    parser.add_argument("--runtime", type=runtime_key, action="append", default=[])
    args = parser.parse_args()
    turns = args.sessions * (args.per_session + 1)  # the warming turns are in the histories
    floor_args = argparse.Namespace(
        sessions=args.sessions,
        per_session=args.per_session,
        history_max_events=0,
        idle_timer=False,
        run_setup=False,
        local_turn=False,
    )
    with tempfile.TemporaryDirectory(prefix="btss-", dir="/tmp") as tmp:
        server = DevServer(Path(tmp)).start()
        try:
            anyio.run(ours, args, server)
            print("floor:", floor_run(floor_args, server))
            show("our node", anyio.run(events, server.address, "Session"), turns)
            show("the floor", anyio.run(events, server.address, "FloorSession"), turns)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
