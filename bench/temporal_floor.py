"""The floor of Temporal's Python SDK under one clustered turn (issue 24): the CPU a
turn of a node that does nothing but Temporal's part of it.

    .venv/bin/python -m bench.temporal_floor [--sessions 50] [--per-session 20]
        [--runs 3] [--compare] [--history-max-events N] [--idle-timer] [--run-setup]

A dev server as the tests start it (`devserver.py`: SQLite in WAL mode, eager activity
dispatch) and, in a process of its own, a "floor node": a Temporal worker with the
options of ours (`runtime.py`: no sandbox, our orjson payload converter, a sticky
queue bound of `heartbeat_timeout_s`, uvloop) that also sends the signals, as our node
does, through the same hand-off (one signal-with-start at a time per session, at most
`MAX_SIGNALS_IN_FLIGHT` sessions at once). Its workflow has the shape of a turn of ours
and nothing else: a signal-with-start carrying an `Arrival` (a ledger record of the
same size as ours), the workflow wakes, runs one activity with a `TurnOrder` (same
timeouts, retry policy and cancellation type as a turn) that returns a `TurnResult` at
once, and waits for the next signal. No ledger, no engine, no adapters.

The drive is `bench.runtime_cpu`'s: every session warmed with one turn, then
`--per-session` followup items per session, sent round robin all at once; it reports
the floor node's and the dev server's CPU a turn over the followups (/proc, as
`runtime_cpu` does). `--compare` runs `bench.runtime_cpu --per-session N` (local and
Temporal) after each floor run, so the numbers come from the same minutes.

The switches add what our workflow does besides a turn, one at a time:
`--history-max-events` goes on as a new run past that many events (workflow.py;
our default is 120), `--idle-timer` starts one durable timer a run for its quiet spells
, `--run-setup` runs a local activity at every run's start (the queue's setup).
`--local-turn` is not our shape but a probe of another: the turn as a local activity
(inside the workflow task: no activity task, one workflow task a turn), which gives up
what a turn activity holds (heartbeats, another node taking a turn over, cancellation).
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.runtime_cpu import cpu_s
from broker.runtime.temporal.devserver import NAMESPACE, DevServer
from broker.runtime.temporal.payloads import data_converter
from broker.runtime.temporal.runtime import MAX_SIGNALS_IN_FLIGHT
from broker.runtime.temporal.session_records import (
    ITEM_SIGNAL,
    Arrival,
    SessionSpec,
    TurnOrder,
    TurnResult,
)
from broker.runtime.temporal.workflow import TURN_RETRY

HEARTBEAT_S = 2.0  # tests/temporal_runtime.py's `heartbeat_timeout_s`
TURN_TIMEOUT_S = 180.0
NOOP = "floor_turn"
SETUP = "floor_setup"
WITHIN_S = 600.0


@dataclasses.dataclass
class FloorSpec(SessionSpec):
    """Our workflow's input (the same payload, 40 bytes more) and the probe's switches."""

    run_setup: bool = False
    local_turn: bool = False


@activity.defn(name=NOOP)
async def floor_turn(order: TurnOrder) -> TurnResult:
    Floor.done += 1
    if Floor.done >= Floor.target:
        Floor.reached.set()
    return TurnResult("completed")


@activity.defn(name=SETUP)
async def floor_setup(label: str) -> str:
    return label


@workflow.defn(name="FloorSession", sandboxed=False)
class FloorWorkflow:
    @workflow.init
    def __init__(self, spec: FloorSpec) -> None:
        self._arrivals: deque[Arrival] = deque(spec.carried)
        self._seen = {str(a.record[0]) for a in spec.carried}

    @workflow.signal(name=ITEM_SIGNAL)
    def arrive(self, arrival: Arrival) -> None:
        item_id = str(arrival.record[0])
        if item_id not in self._seen:  # as ours: a signal sent again is ignored
            self._seen.add(item_id)
            self._arrivals.append(arrival)

    @workflow.run
    async def run(self, spec: FloorSpec) -> None:
        if spec.run_setup:
            await workflow.execute_local_activity(
                SETUP, spec.label, start_to_close_timeout=timedelta(seconds=HEARTBEAT_S)
            )
        if spec.idle_s:  # `--idle-timer`: one durable timer a run, as idle_timer.py
            timer = asyncio.create_task(workflow.sleep(spec.idle_s))
            await workflow.wait_condition(lambda: bool(self._arrivals) or timer.done())
        turn_no = 0
        while True:
            await workflow.wait_condition(lambda: bool(self._arrivals))
            turn_no += 1
            arrival = self._arrivals.popleft()
            order = TurnOrder(spec.label, turn_no, [arrival.record])
            if spec.local_turn:  # not our shape: a probe of another
                await workflow.execute_local_activity(
                    NOOP,
                    order,
                    result_type=TurnResult,
                    start_to_close_timeout=timedelta(seconds=HEARTBEAT_S),
                    retry_policy=TURN_RETRY,
                )
                continue
            await workflow.execute_activity(
                NOOP,
                order,
                result_type=TurnResult,
                start_to_close_timeout=timedelta(seconds=TURN_TIMEOUT_S),
                heartbeat_timeout=timedelta(seconds=HEARTBEAT_S),
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                retry_policy=TURN_RETRY,
            )
            bound = spec.history_max_events
            if bound and workflow.info().get_current_history_length() >= bound:
                workflow.continue_as_new(dataclasses.replace(spec, carried=list(self._arrivals)))


class Floor:
    """The floor node's count of finished turns (its activities run on its loop)."""

    done = 0
    target = 0
    reached: anyio.Event


def record(item_id: str, seq: int, label: str) -> list[Any]:
    """A ledger record the size of a bench message's (`ledger.items.ItemInfo`)."""
    text = f"{item_id}: the quick brown fox"
    return [
        item_id,
        seq,
        label,
        "person",
        "followup",
        "queued",
        None,
        None,
        "bench",
        item_id,
        f"user-{label[-4:]}",
        None,
        "dm",
        f"user-{label[-4:]}",
        None,
        text,
        None,
        None,
    ]


class HandOff:
    """runtime.py's hand-off: a session's items one at a time, in order."""

    def __init__(self, client: Client, tg: Any, args: argparse.Namespace) -> None:
        self.client, self.tg, self.args = client, tg, args
        self.waiting: dict[str, deque[Arrival]] = {}
        self.limit = anyio.CapacityLimiter(MAX_SIGNALS_IN_FLIGHT)

    def hand_over(self, label: str, arrival: Arrival) -> None:
        queue = self.waiting.get(label)
        if queue is not None:
            queue.append(arrival)
            return
        self.waiting[label] = deque([arrival])
        self.tg.start_soon(self._session, label)

    async def _session(self, label: str) -> None:
        queue = self.waiting[label]
        try:
            async with self.limit:
                while queue:
                    await self._signal(label, queue[0])
                    queue.popleft()
        finally:
            del self.waiting[label]

    async def _signal(self, label: str, arrival: Arrival) -> None:
        a = self.args
        spec = FloorSpec(
            label=label,
            idle_s=30.0 if a.idle_timer else 0.0,
            steerable=False,
            turn_timeout_s=TURN_TIMEOUT_S,
            heartbeat_timeout_s=HEARTBEAT_S,
            history_max_events=a.history_max_events,
            run_setup=a.run_setup,
            local_turn=a.local_turn,
        )
        with anyio.fail_after(10):
            await self.client.start_workflow(
                FloorWorkflow.run,
                spec,
                id=label,
                task_queue=a.task_queue,
                start_signal=ITEM_SIGNAL,
                start_signal_args=[arrival],
                retry_policy=RetryPolicy(maximum_attempts=1),
                task_timeout=timedelta(seconds=HEARTBEAT_S),
            )


async def floor_node(args: argparse.Namespace) -> None:
    """The worker process: warm, say so, wait for `go` on stdin, drive, say `done`."""
    client = await Client.connect(args.node, namespace=NAMESPACE, data_converter=data_converter())
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=[FloorWorkflow],
        activities=[floor_turn, floor_setup],
        workflow_runner=UnsandboxedWorkflowRunner(),
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=HEARTBEAT_S),
        graceful_shutdown_timeout=timedelta(seconds=1),
    )
    prefix = uuid.uuid4().hex[:6]
    labels = [f"bench:dm:{prefix}-{n:04d}" for n in range(args.sessions)]
    seq = 0

    async def send(count: int) -> None:
        nonlocal seq
        Floor.target += count
        Floor.reached = anyio.Event()
        for n in range(count):
            seq += 1
            label = labels[n % len(labels)]
            hand_off.hand_over(label, Arrival(record(f"i{prefix}{seq}", seq, label), "followup"))
        with anyio.fail_after(WITHIN_S):
            await Floor.reached.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        hand_off = HandOff(client, tg, args)
        await send(args.sessions)
        print("warmed", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        began = time.perf_counter()
        await send(args.sessions * args.per_session)
        print(f"done {time.perf_counter() - began:.3f}", flush=True)
        tg.cancel_scope.cancel()


def floor_run(args: argparse.Namespace, server: DevServer) -> str:
    """One floor node against `server`; its CPU and the server's a followup turn."""
    assert server.proc is not None
    cmd = [sys.executable, "-m", "bench.temporal_floor", "--node", server.address]
    cmd += ["--task-queue", f"floor-{uuid.uuid4().hex[:8]}"]
    cmd += ["--sessions", str(args.sessions), "--per-session", str(args.per_session)]
    cmd += ["--history-max-events", str(args.history_max_events)]
    cmd += ["--idle-timer"] * args.idle_timer + ["--run-setup"] * args.run_setup
    cmd += ["--local-turn"] * args.local_turn
    node = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert node.stdin is not None and node.stdout is not None
    try:
        if node.stdout.readline().strip() != "warmed":
            raise RuntimeError("the floor node did not warm")
        before = cpu_s(node.pid), cpu_s(server.proc.pid)
        node.stdin.write("go\n")
        node.stdin.flush()
        line = node.stdout.readline().split()
        after = cpu_s(node.pid), cpu_s(server.proc.pid)
        if not line or line[0] != "done":
            raise RuntimeError("the floor node did not finish")
    finally:
        node.kill()
        node.wait()
    turns = args.sessions * args.per_session
    wall = float(line[1])
    ms = [1000 * (b - a) / turns for a, b in zip(before, after, strict=True)]
    return (
        f"{turns} turns in {wall:.1f} s = {turns / wall:.0f} turns/s; "
        f"CPU ms a turn: floor node {ms[0]:.2f}, temporal {ms[1]:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--per-session", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--history-max-events", type=int, default=0)
    parser.add_argument("--idle-timer", action="store_true")
    parser.add_argument("--run-setup", action="store_true")
    parser.add_argument("--local-turn", action="store_true")
    parser.add_argument("--node", help=argparse.SUPPRESS)  # the floor node's process
    parser.add_argument("--task-queue", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.node:
        anyio.run(floor_node, args, backend_options={"use_uvloop": True})
        return
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="btf-", dir="/tmp") as tmp:
            server = DevServer(Path(tmp)).start()
            try:
                result = floor_run(args, server)
            finally:
                server.stop()
        print(f"run {run} floor:    {result}; load {os.getloadavg()[0]:.1f}", flush=True)
        if args.compare:
            compare = [sys.executable, "-m", "bench.runtime_cpu"]
            compare += ["--sessions", str(args.sessions), "--per-session", str(args.per_session)]
            out = subprocess.run(compare, capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                print(f"run {run} runtime_cpu {line}", flush=True)


if __name__ == "__main__":
    main()
