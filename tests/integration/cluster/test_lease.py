"""Two attempts of one turn never run its engine at once (session_lease.py): the node
running a turn is paused (SIGSTOP) past the heartbeat timeout, so Temporal gives the
turn to the other node while the first still holds it; the retry runs the engine only
once the paused attempt's lease lapsed, and the paused attempt, resumed, is cut off
at once (its engine call cancelled, nothing written). The message is answered once,
by one completed turn.

The engine (slow_engine.py) records each call's start, progress and end, with the
node's pid and the time, to a file both nodes share.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import anyio
import pytest

from tests.integration.cluster import slow_engine
from tests.integration.cluster.conftest import ClusterFactory
from tests.integration.wire import Adapter, query, turns, uniq, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]
HEARTBEAT_S = 2.0  # tests/cluster.py: the lease's time-to-live too
ENGINE_S = 4.0
PAUSE_S = 3 * HEARTBEAT_S


async def test_a_paused_attempt_is_cut_off_and_its_retry_runs_the_engine_alone(
    make_cluster: ClusterFactory, short_tmp: Path
) -> None:
    log = short_tmp / "engine.jsonl"
    engine = slow_engine.install(short_tmp, 2, log, ENGINE_S)
    config = {"engine": engine, "queue": {"debounce_ms": 0}}
    cluster = make_cluster(2, config)
    by_pid = {node.proc.pid: node for node in cluster.nodes if node.proc is not None}
    channel, msg = uniq("chat"), uniq("m")
    async with await Adapter.connect(cluster.nodes[1], channel) as adapter:
        session = (await adapter.send_inbound(msg, "slow hello", uniq("u")))["session"]

        async def started() -> bool:
            return any(r["event"] == "start" for r in slow_engine.records(log))

        await wait_until(started, "the engine called", within=30)
        first = next(r for r in slow_engine.records(log) if r["event"] == "start")["pid"]
        os.kill(first, signal.SIGSTOP)
        stopped = time.time()
        try:
            await anyio.sleep(PAUSE_S)  # Temporal gives the turn to the other node
        finally:
            os.kill(first, signal.SIGCONT)
        resumed = time.time()
        told = await adapter.deliver(session=session, within=60)
        await anyio.sleep(1)  # a late reply of the cut-off attempt would show by now

    assert (told["status"], told["text"]) == ("final", "slow hello")
    calls = slow_engine.records(log)
    for r in calls:
        if r["event"] != "tick":
            print(r["pid"], r["event"], round(r["t"] - stopped, 2))
    for node in cluster.nodes:
        assert node.proc is not None
        print(node.proc.pid, "\n".join(node.log_lines()[-60:]))
    starts = [r for r in calls if r["event"] == "start"]
    assert [r["pid"] for r in starts][:1] == [first] and len(starts) == 2, calls
    second = starts[1]["pid"]
    assert second != first and second in by_pid
    mine = [r for r in calls if r["pid"] == first]
    theirs = [r for r in calls if r["pid"] == second]
    # The retry waited for the paused attempt's lease: renewed up to a quarter of its
    # time-to-live before the pause, it lapsed no sooner than three quarters after.
    assert starts[1]["t"] >= stopped + 0.75 * HEARTBEAT_S - 0.3, (stopped, starts[1])
    # Resumed, the paused attempt was cut off at once: its engine call cancelled
    # within a beat, never finished, never answered.
    assert mine[-1]["event"] == "cancelled", mine[-3:]
    assert mine[-1]["t"] - resumed < 1.0, (resumed, mine[-1])
    assert sum(1 for r in mine if r["event"] == "tick" and r["t"] >= resumed) <= 1
    assert [r["event"] for r in theirs][-1] == "end"
    assert "lost its session's lease" in by_pid[first].log()
    d = cluster.nodes[1]
    ran = turns(d, session)
    assert [t["status"] for t in ran].count("completed") == 1, ran
    frames = query(d, "SELECT frame FROM outbox WHERE session_label = ?", session)
    finals = [f for (f,) in frames if json.loads(f).get("status") == "final"]
    assert len(finals) == 1, frames
