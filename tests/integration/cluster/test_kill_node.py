"""Kill a node: three nodes under load, one of them killed -9 mid-turn again and again
and restarted each time; then, from the ledger: no acked message lost, none consumed
twice, no two turns of a session overlapping in time (across nodes), and every session
with work waiting at a kill answered again within 10 s of it.

The scale is set by KILL_SESSIONS and KILL_COUNT (the issue's run: 300 and 20). Each
round prints where its time went (CPU of each process, the nodes' replays).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.cluster import Cluster, cpu_seconds, scrape
from tests.harness import DaemonProcess
from tests.integration.cluster.conftest import ClusterFactory
from tests.integration.wire import Adapter, query, uniq, wait_until
from wire.client import BrokerError

SESSIONS = int(os.environ.get("KILL_SESSIONS", "30"))
KILLS = int(os.environ.get("KILL_COUNT", "4"))
# A round of SESSIONS turns drains at the cluster's rate: a few turns/s on a busy
# 2-core machine, so the scale may need minutes a round.
ROUND_S = max(60, SESSIONS)
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.timeout(max(600, ROUND_S * (KILLS + 2))),
]
ECHO: dict[str, Any] = {"engine": {"chunks": 3, "delay_ms": 100}, "queue": {"debounce_ms": 0}}
if "KILL_HISTORY_MAX" in os.environ:  # `[runtime] history_max_events`, to compare
    ECHO["runtime"] = {"history_max_events": int(os.environ["KILL_HISTORY_MAX"])}
ANSWERED_WITHIN_MS = 10_000


def consumed(d: DaemonProcess) -> Counter[str]:
    """msg_id -> the number of completed turns that took it as an input."""
    rows = query(
        d,
        "SELECT m.msg_id FROM messages m JOIN turns t ON t.id = m.turn_id"
        " WHERE m.role = 'user' AND t.status = 'completed' AND m.msg_id IS NOT NULL",
    )
    return Counter(str(r[0]) for r in rows)


def answered_of(d: DaemonProcess, msgs: list[str]) -> int:
    """How many of `msgs` a completed turn took: the round's own rows, not the run's."""
    marks = ",".join("?" * len(msgs))
    rows = query(
        d,
        "SELECT count(DISTINCT m.msg_id) FROM messages m JOIN turns t ON t.id = m.turn_id"
        " WHERE m.role = 'user' AND t.status = 'completed' AND m.msg_id IN (" + marks + ")",
        *msgs,
    )
    return int(rows[0][0])


def turn_times(d: DaemonProcess) -> dict[str, list[tuple[int, int, str]]]:
    """session -> (started_at, completed_at, status) of its turns, in start order."""
    out: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for session, start, end, status in query(
        d, "SELECT session_label, started_at, completed_at, status FROM turns ORDER BY started_at"
    ):
        out[str(session)].append((int(start), int(end), str(status)))
    return out


async def test_kill9_nodes_under_load(
    make_cluster: ClusterFactory, temporal_server: Any, pg_template: tuple[Any, str]
) -> None:
    cluster = make_cluster(3, ECHO, metrics=True)
    costs = Costs(cluster, temporal_server.proc.pid, pg_template[0].data)
    first = cluster.nodes[0]  # holds the adapter; the others are killed in turn
    channel = uniq("chat")
    senders = [uniq("u") for _ in range(SESSIONS)]
    acked: dict[str, tuple[str, int]] = {}  # msg_id -> (session, ack time ms)
    kills: list[int] = []
    rounds: list[tuple[int, list[str]]] = []  # (its last ack, ms; its messages)
    stop = anyio.Event()
    round_sent = anyio.Event()

    async def load(adapter: Adapter) -> None:
        """One message a session a round; the next round once this one is answered
        (a closed loop: the load follows what the cluster serves)."""
        nonlocal round_sent
        n = 0
        while not stop.is_set():
            this_round = []
            for sender in senders:
                msg = uniq("m")
                ack = await send_retrying(adapter, msg, f"one two three {n}", sender)
                acked[msg] = (ack["session"], int(time.time() * 1000))
                this_round.append(msg)
            n += 1
            rounds.append((int(time.time() * 1000), this_round))
            round_sent.set()
            round_sent = anyio.Event()

            async def answered(msgs: list[str] = this_round) -> bool:
                await anyio.sleep(0.1)  # this look's own load, bounded (wait_until: 20 ms)
                done = await anyio.to_thread.run_sync(answered_of, first, msgs)
                return done == len(msgs)

            await wait_until(answered, f"round {n} answered", within=ROUND_S)
            await anyio.to_thread.run_sync(costs.look, n)

    refused = 0

    async def send_retrying(adapter: Adapter, msg: str, text: str, sender: str) -> Any:
        """`overloaded` stores nothing and asks the adapter to try again (PROTOCOL.md):
        under 300 sessions a node's hand-off to Temporal can miss its 1 s bound."""
        nonlocal refused
        for attempt in range(150):  # 30 s
            try:
                return await adapter.send_inbound(msg, text, sender)
            except BrokerError as exc:
                if "overloaded" not in str(exc) or attempt == 149:
                    raise
                refused += 1
                await anyio.sleep(0.2)

    async def kill_some() -> None:
        for k in range(KILLS):
            await round_sent.wait()
            await anyio.sleep(0.2)  # its turns are streaming now (3 chunks, 100 ms apart)
            victim = cluster.nodes[1 + k % 2]
            await anyio.to_thread.run_sync(victim.kill)
            kills.append(int(time.time() * 1000))
            await anyio.to_thread.run_sync(functools.partial(victim.start, timeout=60))
        await round_sent.wait()
        stop.set()

    async with await Adapter.connect(first, channel) as adapter:
        async with anyio.create_task_group() as tg:
            tg.start_soon(load, adapter)
            tg.start_soon(kill_some)

        print(f"load done: {len(acked)} acked, {len(kills)} kills", flush=True)
        await wait_consumed(first, acked, temporal_server.address)

    report = measure(first, acked, rounds, kills)
    report["overloaded_then_resent"] = refused
    report["handed_over_at_restart"] = [
        json.loads(line)["items"]
        for node in cluster.nodes[1:]
        for line in node.log_lines()
        if '"backlog rehydrated"' in line
    ]
    print("kill-a-node:", report)
    assert not report["lost"] and not report["twice"] and not report["overlaps"], report
    assert report["slowest_answer_after_kill_ms"] <= ANSWERED_WITHIN_MS, report


async def wait_consumed(d: DaemonProcess, acked: dict[str, tuple[str, int]], address: str) -> None:
    """Until every acked message is consumed (bounded); else say what holds the rest
    (the report's `lost` then fails the test)."""

    async def all_consumed() -> bool:
        done = await anyio.to_thread.run_sync(consumed, d)
        return all(m in done for m in acked)

    try:
        await wait_until(all_consumed, "every acked message consumed", within=180)
    except AssertionError:
        await tell_unconsumed(d, acked, address)


async def tell_unconsumed(
    d: DaemonProcess, acked: dict[str, tuple[str, int]], address: str
) -> None:
    """What the ledger and Temporal say of each acked message no turn consumed."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client

    done = consumed(d)
    client = await Client.connect(address)
    for msg in [m for m in acked if m not in done][:5]:
        item = query(
            d,
            "SELECT q.id, q.status, q.reason, q.turn_id FROM queue_items q"
            " JOIN inbound i ON i.item_id = q.id WHERE i.msg_id = ?",
            msg,
        )
        session = acked[msg][0]
        handle = client.get_workflow_handle(session)
        described = await handle.describe()
        events = [EventType.Name(e.event_type) async for e in handle.fetch_history_events()]
        print(f"not consumed: {msg} of {session}: item {item}; run {described.run_id}")
        print(f"  {described.status}, {len(events)} events, the last: {events[-12:]}")


def measure(
    d: DaemonProcess,
    acked: dict[str, tuple[str, int]],
    rounds: list[tuple[int, list[str]]],
    kills: list[int],
) -> dict[str, Any]:
    """What the ledger shows after the run: lost, twice, overlapping turns, and how
    long sessions waited, after each kill and in each round (a round's drain: from
    its last ack to its last answer, with or without a kill in it: the baseline)."""
    done = consumed(d)
    times = turn_times(d)
    overlaps = [
        (s, a, b) for s, ts in times.items() for a, b in itertools.pairwise(ts) if b[0] < a[1]
    ]
    answered = answer_times(d)
    per_kill = answered_again_ms(acked, answered, times, kills)
    for kill, (worst, session) in zip(kills, per_kill, strict=True):
        around = [(s - kill, e - kill, st) for s, e, st in times[session] if e > kill - 2000]
        print(f"kill at {kill}: slowest {session} answered after {worst} ms; turns {around[:4]}")
    drains = []
    for last_ack, msgs in rounds:
        end = max(answered.get(m, 0) for m in msgs)
        drains.append((end - last_ack, any(last_ack <= k <= end for k in kills)))
    return {
        "sessions": SESSIONS,
        "kills": len(kills),
        "acked": len(acked),
        "lost": len([m for m in acked if m not in done]),
        "twice": len([m for m, n in done.items() if m in acked and n > 1]),
        "overlaps": len(overlaps),
        "slowest_answer_after_kill_ms": max((w for w, _session in per_kill), default=0),
        "slowest_per_kill_ms": [w for w, _session in per_kill],
        "round_drain_ms_quiet": [ms for ms, killed in drains if not killed],
        "round_drain_ms_with_kill": [ms for ms, killed in drains if killed],
    }


def answer_times(d: DaemonProcess) -> dict[str, int]:
    """msg_id -> when the completed turn that took it ended (ms)."""
    return {
        str(m): int(end)
        for m, end in query(
            d,
            "SELECT m.msg_id, t.completed_at FROM messages m JOIN turns t ON t.id = m.turn_id"
            " WHERE m.role = 'user' AND t.status = 'completed' AND m.msg_id IS NOT NULL",
        )
    }


def answered_again_ms(
    acked: dict[str, tuple[str, int]],
    answered: dict[str, int],
    times: dict[str, list[tuple[int, int, str]]],
    kills: list[int],
) -> list[tuple[int, str]]:
    """Per kill, the longest wait (and its session), over the sessions with a message
    acked before the kill and answered after it, from the kill to that session's next
    completed turn."""
    per_kill = []
    for kill in kills:
        waiting = {s for m, (s, at) in acked.items() if at <= kill < answered.get(m, 0)}
        worst = (0, "")
        for session in sorted(waiting):
            ends = [end for _start, end, status in times[session] if status == "completed"]
            worst = max(worst, (min(end for end in ends if end > kill) - kill, session))
        per_kill.append(worst)
    return per_kill


class Costs:
    """Where each round's time went: the CPU seconds of each process of the cluster
    (nodes, Temporal's dev server, PostgreSQL with its backends, this test) and the
    nodes' worker metrics (workflows replayed, and how long; workflow tasks), printed
    per round with the load average."""

    METRICS = (
        "temporal_sticky_cache_miss",
        "temporal_sticky_cache_hit",
        "temporal_workflow_task_replay_latency_count",
        "session_replay_events_count",
        "session_replay_events_sum",
        "session_replay_seconds_sum",
        "temporal_workflow_task_execution_latency_count",
        "temporal_workflow_task_execution_latency_sum",
        "temporal_workflow_task_schedule_to_start_latency_sum",
    )

    def __init__(self, cluster: Cluster, server_pid: int, pg_data: Path) -> None:
        self.cluster = cluster
        self.server_pid = server_pid
        self.pg_pid = int((pg_data / "postmaster.pid").read_text().split()[0])
        self.started = time.monotonic()
        self.cpu = self._cpu()
        self.metrics = self._metrics()

    def _cpu(self) -> dict[str, float]:
        nodes = {
            f"n{i}": cpu_seconds(node.proc.pid) if node.proc is not None else 0.0
            for i, node in enumerate(self.cluster.nodes)
        }
        return nodes | {
            "temporal": cpu_seconds(self.server_pid),
            "postgres": cpu_seconds(self.pg_pid),
            "test": time.process_time(),
        }

    def _metrics(self) -> list[dict[str, float]]:
        return [scrape(node.config["runtime"]["metrics_address"]) for node in self.cluster.nodes]

    def look(self, round_no: int) -> None:
        cpu, metrics = self._cpu(), self._metrics()
        # A node restarted since the last look counts from its start.
        spent = {k: round(v - self.cpu[k] if v >= self.cpu[k] else v, 1) for k, v in cpu.items()}
        moved: dict[str, float] = {}
        for before, after in zip(self.metrics, metrics, strict=True):
            for name in self.METRICS:
                now, then = after.get(name, 0.0), before.get(name, 0.0)
                moved[name] = moved.get(name, 0.0) + (now - then if now >= then else now)
        self.cpu, self.metrics = cpu, metrics
        at = time.monotonic() - self.started
        load = os.getloadavg()[0]
        figures = {k.removeprefix("temporal_"): round(v, 1) for k, v in moved.items()}
        print(
            f"round {round_no} at {at:.0f} s, load {load:.1f}: cpu s {spent}; {figures}", flush=True
        )
