"""Failover whatever the session was doing (docs/cluster.md, "Failover"): two nodes,
and the node that holds the session's work killed -9 while the session compacts,
while it waits on a worker (an `agent_send` task running), and while it holds a due
timer. Each time the session is answered again within 10 s of the kill, and nothing
acked is lost or consumed twice.

The engine (slow_engine.py) is slow only for a compaction's summary and for inputs
that start with "slow", and records which node ran each call, so the test kills the
node that holds the work.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.cluster import Cluster
from tests.harness import DaemonProcess
from tests.integration.cluster import slow_engine
from tests.integration.cluster.conftest import ClusterFactory
from tests.integration.cluster.test_kill_node import consumed, turn_times
from tests.integration.wire import Adapter, op, query, uniq, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]
SLOW_S = 2.0  # a slow call: long enough to be caught mid-way by a kill
ANSWERED_WITHIN_MS = 10_000
SMALL = {"context_window": 400, "reserve_reply_tokens": 60, "keep_recent_ratio": 0.25}
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike"


def within_ms() -> int:
    """The 10 s bound; twice that when the machine is far past its cores (the whole
    suite in parallel), as the failover test allows, saying so."""
    load = os.getloadavg()[0]
    if load > 4 * (os.cpu_count() or 1):
        print(f"load average {load:.1f}: allowing {2 * ANSWERED_WITHIN_MS} ms")
        return 2 * ANSWERED_WITHIN_MS
    return ANSWERED_WITHIN_MS


@contextlib.contextmanager
def telling(cluster: Cluster, log: Path) -> Iterator[None]:
    """On a failure, print the engine's calls and the nodes' warnings and errors."""
    try:
        yield
    except BaseException:
        for r in slow_engine.records(log):
            if r["event"] != "tick":
                print("engine:", r)
        for n, node in enumerate(cluster.nodes):
            for line in node.log_lines():
                if '"level":"debug"' not in line and '"level":"info"' not in line:
                    print(f"node {n}:", line[:3000])
        raise


def two_nodes(make_cluster: ClusterFactory, short_tmp: Path, **engine: Any) -> tuple[Cluster, Path]:
    log = short_tmp / "engine.jsonl"
    table = slow_engine.install(short_tmp, 2, log, SLOW_S, **engine)
    return make_cluster(2, {"engine": table, "queue": {"debounce_ms": 0}}), log


async def runner(log: Path, kind: str, prefix: str = "") -> int:
    """The pid of the node that started a call of `kind` whose input starts `prefix`."""

    def found() -> int | None:
        for r in slow_engine.records(log):
            if r["event"] == "start" and r["kind"] == kind and r["said"].startswith(prefix):
                return int(r["pid"])
        return None

    async def started() -> bool:
        return found() is not None

    await wait_until(started, f"a {kind} call started", within=60)
    pid = found()
    assert pid is not None
    return pid


def kill(cluster: Cluster, pid: int) -> tuple[DaemonProcess, int]:
    """Kill -9 the node whose pid is `pid`; the surviving node and the kill's time."""
    (dead,) = [n for n in cluster.nodes if n.proc is not None and n.proc.pid == pid]
    dead.kill()
    (alive,) = [n for n in cluster.nodes if n is not dead]
    return alive, int(time.time() * 1000)


async def answered_at(d: DaemonProcess, sql: str, *args: Any) -> int:
    """When the first completed turn `sql` finds (its `completed_at`) ended."""

    def first() -> int | None:
        rows = query(d, sql, *args)
        return int(rows[0][0]) if rows else None

    async def ended() -> bool:
        return await anyio.to_thread.run_sync(first) is not None

    await wait_until(ended, "the session answered again", within=60)
    at = first()
    assert at is not None
    return at


def no_overlaps(d: DaemonProcess) -> list[Any]:
    return [
        (s, x, y)
        for s, ts in turn_times(d).items()
        for x, y in itertools.pairwise(ts)
        if y[0] < x[1]
    ]


async def test_a_node_killed_while_its_session_compacts(
    make_cluster: ClusterFactory, short_tmp: Path
) -> None:
    cluster, log = two_nodes(make_cluster, short_tmp, **SMALL)
    with telling(cluster, log):
        channel, sender = uniq("chat"), uniq("u")
        acked: list[str] = []
        async with await Adapter.connect(cluster.nodes[1], channel) as adapter:
            for n in range(30):  # until a turn compacts first
                msg = uniq("m")
                await adapter.send_inbound(msg, f"message {n}: {WORDS}", sender, mode="followup")
                acked.append(msg)

                async def settled(m: str = msg) -> bool:
                    compacting = any(r["kind"] == "compaction" for r in slow_engine.records(log))
                    return compacting or m in consumed(cluster.nodes[1])

                await wait_until(settled, "the message answered or a compaction begun", within=30)
                if any(r["kind"] == "compaction" for r in slow_engine.records(log)):
                    break
        pid = await runner(log, "compaction")
        alive, kill_at = kill(cluster, pid)
        last = acked[-1]  # its turn waits behind the compaction
        ended = await answered_at(
            alive,
            "SELECT t.completed_at FROM messages m JOIN turns t ON t.id = m.turn_id"
            " WHERE m.msg_id = ? AND m.role = 'user' AND t.status = 'completed'",
            last,
        )
        print(f"compaction: answered {ended - kill_at} ms after the kill")
        done = consumed(alive)
        assert all(done[m] == 1 for m in acked), {m: done[m] for m in acked}
        compactions = query(
            alive,
            "SELECT status, reason FROM turns WHERE type = 'compaction' ORDER BY started_at",
        )
        assert [s for s, _r in compactions].count("completed") == 1, compactions
        assert no_overlaps(alive) == []
        assert ended - kill_at <= within_ms()


async def test_a_node_killed_while_its_session_waits_on_a_worker(
    make_cluster: ClusterFactory, short_tmp: Path
) -> None:
    cluster, log = two_nodes(make_cluster, short_tmp)
    with telling(cluster, log):
        channel = uniq("chat")
        async with await Adapter.connect(cluster.nodes[1], channel) as adapter:
            parent = (await adapter.send_inbound(uniq("m"), "hello", uniq("u")))["session"]
            await adapter.deliver(session=parent)
        hint = uniq("w")
        sent = await op(
            cluster.nodes[1],
            "agent_send",
            op="dispatch",
            target={"kind": "new_session", "label_hint": hint},
            task="slow: count the stars",
            parent_session=parent,
        )
        worker = str(sent["session"])
        pid = await runner(log, "turn", "slow")
        alive, kill_at = kill(cluster, pid)
        ended = await answered_at(
            alive,
            "SELECT completed_at FROM turns WHERE session_label = ? AND type = 'worker_result'"
            " AND status = 'completed'",
            parent,
        )
        print(f"worker: its result answered {ended - kill_at} ms after the kill")
        await anyio.sleep(1)  # a second result would have come by now
        assert query(alive, "SELECT status FROM dispatches WHERE target_session = ?", worker) == [
            ("completed",)
        ]
        results = query(
            alive,
            "SELECT count(*) FROM queue_items WHERE source = 'worker' AND session_label = ?",
            parent,
        )
        assert results == [(1,)]
        worker_turns = query(
            alive, "SELECT status FROM turns WHERE session_label = ? ORDER BY started_at", worker
        )
        assert [s for (s,) in worker_turns].count("completed") == 1, worker_turns
        assert no_overlaps(alive) == []
        assert ended - kill_at <= within_ms()


async def timer_holder(address: str, timer: str) -> str:
    """The node id of the worker that ran the timer workflow's latest task: its run is
    in that node's cache, and its next task goes to that node's sticky queue."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client
    from temporalio.service import RPCError, RPCStatusCode

    client = await Client.connect(address)
    identity = ""
    try:
        async for e in client.get_workflow_handle(f"timer:{timer}").fetch_history_events():
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                identity = e.workflow_task_started_event_attributes.identity
    except RPCError as e:
        # timer.add commits first and starts the workflow after; until then, no holder
        if e.status != RPCStatusCode.NOT_FOUND:
            raise
    return identity


async def test_a_node_killed_while_it_holds_a_due_timer(
    make_cluster: ClusterFactory, short_tmp: Path
) -> None:
    cluster, log = two_nodes(make_cluster, short_tmp)
    with telling(cluster, log):
        channel = uniq("chat")
        async with await Adapter.connect(cluster.nodes[1], channel) as adapter:
            session = (await adapter.send_inbound(uniq("m"), "hello", uniq("u")))["session"]
            await adapter.deliver(session=session)
        due_in_s = 4.0
        added = await op(cluster.nodes[0], "timer.add", session=session, text="tick", in_s=due_in_s)
        due_at = int(added["next_at"])
        address = cluster.nodes[0].config["runtime"]["address"]

        async def held() -> bool:
            return bool(await timer_holder(address, added["timer"]))

        await wait_until(held, "the timer's workflow run by a node", within=30)
        holder = await timer_holder(address, added["timer"])
        (node,) = [n for n in cluster.nodes if n.config["node_id"] == holder]
        await anyio.sleep(max(0.0, (due_at - 300) / 1000 - time.time()))  # just before it is due
        assert node.proc is not None
        alive, kill_at = kill(cluster, node.proc.pid)
        ended = await answered_at(
            alive,
            "SELECT t.completed_at FROM queue_items q JOIN turns t ON t.id = q.turn_id"
            " WHERE q.session_label = ? AND q.source = 'timer' AND t.status = 'completed'",
            session,
        )
        since = max(kill_at, due_at)
        print(f"timer: answered {ended - since} ms after it was due with its node dead")
        await anyio.sleep(1)  # a second firing would have come by now
        timer = added["timer"]
        firings = query(alive, "SELECT count(*) FROM timer_firings WHERE timer_id = ?", timer)
        assert firings == [(1,)]
        items = query(
            alive,
            "SELECT status FROM queue_items WHERE session_label = ? AND source = 'timer'",
            session,
        )
        assert items == [("done",)]
        assert no_overlaps(alive) == []
        assert ended - since <= within_ms()
