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

import itertools
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.cluster import Cluster
from tests.integration.cluster import slow_engine
from tests.integration.cluster.conftest import ClusterFactory
from tests.integration.wire import Adapter, query, turns, uniq, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]
HEARTBEAT_S = 2.0  # tests/cluster.py; the lease lives 1.5 times that (session_lease.py)
ENGINE_S = 4.0
PAUSE_S = 3 * HEARTBEAT_S


class Try:
    """One message whose turn's node was paused: what the engine and the ledger saw."""

    def __init__(self, text: str, stopped: float, resumed: float, first: int) -> None:
        self.text, self.stopped, self.resumed, self.first = text, stopped, resumed, first
        self.session = ""
        self.told: dict[str, Any] = {}


async def pause_mid_turn(cluster: Cluster, log: Path, n: int) -> Try:
    """Send a slow message, pause the node whose engine starts it for PAUSE_S, resume it,
    and wait for the answer."""
    text = f"slow hello {n}"
    async with await Adapter.connect(cluster.nodes[1], uniq("chat")) as adapter:
        session = (await adapter.send_inbound(uniq("m"), text, uniq("u")))["session"]

        def first() -> int | None:
            calls = slow_engine.records(log)
            return next(
                (r["pid"] for r in calls if r["event"] == "start" and r["said"] == text), None
            )

        async def started() -> bool:
            return first() is not None

        await wait_until(started, "the engine called", within=30)
        pid = first()
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        stopped = time.time()
        try:
            await anyio.sleep(PAUSE_S)  # Temporal gives the turn to another worker
        finally:
            os.kill(pid, signal.SIGCONT)
        done = Try(text, stopped, time.time(), pid)
        done.session = session
        done.told = await adapter.deliver(session=session, within=60)
        await anyio.sleep(1)  # a late reply of the cut-off attempt would show by now
    return done


async def test_a_paused_attempt_is_cut_off_and_its_retry_runs_the_engine_alone(
    make_cluster: ClusterFactory, short_tmp: Path
) -> None:
    log = short_tmp / "engine.jsonl"
    engine = slow_engine.install(short_tmp, 2, log, ENGINE_S)
    cluster = make_cluster(2, {"engine": engine, "queue": {"debounce_ms": 0}})
    by_pid = {node.proc.pid: node for node in cluster.nodes if node.proc is not None}
    # The paused node's own pending polls may take the retries too (they are answered
    # to it, paused): then it runs the turn again itself once resumed, and this try
    # shows no overlap. Up to three tries, until the retry ran on the other node.
    for n in range(3):
        done = await pause_mid_turn(cluster, log, n)
        calls = [r for r in slow_engine.records(log) if r["said"] == done.text]
        for r in calls:
            if r["event"] != "tick":
                print(n, r["pid"], r["event"], round(r["t"] - done.stopped, 2))
        # Whichever node ran it, the person is answered by the turn's text: no attempt
        # the server gave up (a poll answered while its node was paused) wrote an abort.
        assert (done.told["status"], done.told["text"]) == ("final", done.text), (n, calls)
        starts = [r for r in calls if r["event"] == "start"]
        if any(r["pid"] != done.first for r in starts):
            break
    else:
        raise AssertionError("in three tries, no retry ran on the node left running")
    assert (done.told["status"], done.told["text"]) == ("final", done.text)
    assert starts[0]["pid"] == done.first
    assert {r["pid"] for r in calls} <= set(by_pid)
    # Each engine call of the turn, in order: (node, start, stop). A node runs one call of
    # a turn at a time, so its start and its next end or cancel bound one call.
    runs: list[tuple[int, float, float]] = []
    began: dict[int, float] = {}
    for r in sorted(calls, key=lambda r: float(r["t"])):
        if r["event"] == "start":
            assert r["pid"] not in began, calls
            began[r["pid"]] = r["t"]
        elif r["event"] in ("end", "cancelled"):
            runs.append((r["pid"], began.pop(r["pid"]), r["t"]))
    assert not began, calls  # every call ended or was cut off
    (paused, *retries) = sorted(runs, key=lambda run: run[1])  # by start
    assert paused[0] == done.first
    # Resumed, the paused attempt was cut off at once: cancelled within a beat, with at
    # most one progress mark after the pause ended, never finished.
    mine = [r for r in calls if r["pid"] == done.first and r["t"] <= paused[2]]
    assert mine[-1]["event"] == "cancelled", mine[-3:]
    assert paused[2] - done.resumed < 1.0, (done.resumed, paused)
    assert sum(1 for r in mine if r["event"] == "tick" and r["t"] >= done.resumed) <= 1
    # No retry ran the engine while the paused attempt could: one on the node left
    # running began only once the paused attempt's lease lapsed (renewed up to a quarter
    # of its time-to-live before the pause, it lapsed no sooner than three quarters
    # after: checked here against the heartbeat timeout's, shorter, for renewals late
    # under load), and none overlapped the paused attempt's last beat or another retry.
    # Under load a retry may itself be cut off, and the resumed node may take the next.
    assert any(pid != done.first for pid, _, _ in retries), calls
    for pid, start, _ in retries:
        if pid != done.first:
            assert start >= done.stopped + 0.75 * HEARTBEAT_S - 0.3, (done.stopped, calls)
        if start > done.stopped:
            assert start >= paused[2] or start < done.resumed, (paused, calls)
    for (_, _, stop), (_, start, _) in itertools.pairwise(retries):
        assert start >= stop, calls
    # Exactly one call ran to its end, and nothing of the turn ran after it.
    assert [r["event"] for r in calls].count("end") == 1, calls
    assert max(calls, key=lambda r: float(r["t"]))["event"] == "end", calls
    # Resumed, the paused attempt finds its lease's time over and, as likely first, the
    # server's cancellation of an attempt it timed out: either cuts it off, writing
    # nothing (activities.py `superseded`); its activity ends lost or cancelled (once
    # seen: a scope's cancellation that reached the activity as such, not as LeaseLost).
    paused_log = by_pid[done.first].log()
    assert "lost its session's lease" in paused_log or "CancelledError" in paused_log
    d = cluster.nodes[1]
    ran = turns(d, done.session)
    assert [t["status"] for t in ran].count("completed") == 1, ran
    frames = query(d, "SELECT frame FROM outbox WHERE session_label = ?", done.session)
    finals = [f for (f,) in frames if json.loads(f).get("status") == "final"]
    assert len(finals) == 1, frames
