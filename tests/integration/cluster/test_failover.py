"""Failover in seconds: two nodes, 40 sessions under load, the node holding the
adapter killed -9 mid-stream; the adapter goes on through the other node, resending
what the dead one never acked. From the ledger afterwards: no acked message lost,
none consumed twice, every session's messages consumed in the order the ledger
queued them, no two turns of a session overlapping; and every session that had work
acked before the kill answered again within 10 s of it (docs/cluster.md, "Failover").

The dead node acked its last messages without handing them to their workflows
(a hand-off follows the ack): those are what the surviving node must find quickly.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import defaultdict
from typing import Any

import anyio
import pytest

from tests.integration.cluster.conftest import ClusterFactory
from tests.integration.cluster.test_kill_node import answer_times, consumed, turn_times
from tests.integration.wire import Adapter, query, uniq, wait_until
from wire.client import BrokerError

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(300)]
SESSIONS = 40
BEFORE_KILL = 100
AFTER_KILL = 100
SENDERS_AT_ONCE = 8  # messages in flight at once, so some are acked and not yet handed over
ANSWERED_WITHIN_MS = 10_000
CONFIG: dict[str, Any] = {"engine": {"chunks": 1, "delay_ms": 20}, "queue": {"debounce_ms": 0}}


def consumed_in_order(d: Any) -> list[str]:
    """The sessions whose messages turns consumed in another order than the ledger
    queued them (by the queue's seq)."""
    queued = query(
        d,
        "SELECT q.session_label, i.msg_id FROM queue_items q JOIN inbound i ON i.item_id = q.id"
        " ORDER BY q.seq",
    )
    ran = query(
        d,
        "SELECT t.session_label, m.msg_id FROM messages m JOIN turns t ON t.id = m.turn_id"
        " WHERE m.role = 'user' AND t.status = 'completed' AND m.msg_id IS NOT NULL"
        " ORDER BY t.started_at, m.seq",
    )
    want: dict[str, list[str]] = defaultdict(list)
    got: dict[str, list[str]] = defaultdict(list)
    for session, msg in queued:
        want[str(session)].append(str(msg))
    for session, msg in ran:
        got[str(session)].append(str(msg))
    bad = sorted(s for s in got if got[s] != [m for m in want[s] if m in set(got[s])])
    for s in bad:
        print(f"out of order in {s}: queued {want[s]}, ran {got[s]}")
    return bad


class Sending:
    """What the senders saw: acks (msg_id -> session, when), what went unacked."""

    def __init__(self) -> None:
        self.acked: dict[str, tuple[str, int]] = {}
        self.unacked: list[tuple[str, str, int]] = []
        self.enough = anyio.Event()  # BEFORE_KILL messages acked


async def send_retrying(adapter: Adapter, msg: str, text: str, sender: str) -> Any:
    """`overloaded` stores nothing and asks the adapter to try again (PROTOCOL.md): a
    node whose hand-offs to Temporal lag says so rather than ack."""
    for attempt in range(100):  # 20 s
        try:
            return await adapter.send_inbound(msg, text, sender, mode="followup")
        except BrokerError as exc:
            if "overloaded" not in str(exc) or attempt == 99:
                raise
            await anyio.sleep(0.2)
    raise AssertionError("unreachable")


async def send_some(
    node: Any,
    channel: str,
    batch: list[tuple[str, str, int]],
    sent: Sending,
) -> None:
    """Each sender's messages in order, SENDERS_AT_ONCE senders at a time, each on
    an adapter connection of its own."""
    by_sender: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for item in batch:
        by_sender[item[1]].append(item)
    queue = list(by_sender.values())

    async def one_connection() -> None:
        try:
            adapter = await Adapter.connect(node, channel)
        except (OSError, TimeoutError):
            while queue:
                sent.unacked.extend(queue.pop())
            return
        async with adapter:
            while queue:
                items = queue.pop(0)
                for n, (msg, _sender, i) in enumerate(items):
                    try:
                        ack = await send_retrying(adapter, msg, f"hello {i}", items[0][1])
                    except (BrokerError, OSError, anyio.EndOfStream, anyio.BrokenResourceError):
                        sent.unacked.extend(items[n:])  # the node died: to the other one
                        while queue:
                            sent.unacked.extend(queue.pop())
                        return
                    sent.acked[msg] = (str(ack["session"]), int(time.time() * 1000))
                    if len(sent.acked) >= BEFORE_KILL:
                        sent.enough.set()

    async with anyio.create_task_group() as tg:
        for _ in range(SENDERS_AT_ONCE):
            tg.start_soon(one_connection)


async def tell_signals(d: Any, msgs: list[str]) -> None:
    """For a message consumed twice: its session's workflow runs and, in each, the
    item signals and activities in order (a diagnosis, printed)."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client

    address = d.config["runtime"]["address"]
    client = await Client.connect(address)
    for msg in msgs:
        (item, session) = query(
            d,
            "SELECT q.id, q.session_label FROM queue_items q JOIN inbound i ON i.item_id = q.id"
            " WHERE i.msg_id = ?",
            msg,
        )[0]
        print(f"signals for {msg} (item {item}) of {session}:")
        async for run in client.list_workflows(f"WorkflowId = '{session}'"):
            handle = client.get_workflow_handle(session, run_id=run.run_id)
            lines = []
            async for e in handle.fetch_history_events():
                name = EventType.Name(e.event_type).removeprefix("EVENT_TYPE_")
                if (
                    "SIGNALED" in name
                    or ("STARTED" in name and "ACTIVITY" in name)
                    or "CONTINUED" in name
                ):
                    text = str(e)
                    lines.append(f"{e.event_id}:{name}:{'ITEM' if item in text else ''}")
            print(f"  run {run.run_id} {run.start_time}: {' '.join(lines)}")


async def test_a_dead_nodes_sessions_are_answered_again_within_10_s(
    make_cluster: ClusterFactory,
) -> None:
    cluster = make_cluster(2, CONFIG)
    a, b = cluster.nodes
    channel = uniq("chat")
    senders = [uniq("u") for _ in range(SESSIONS)]
    sent = Sending()
    acked = sent.acked  # msg_id -> (session, ack time ms)
    todo = [(uniq("m"), senders[n % SESSIONS], n) for n in range(BEFORE_KILL + AFTER_KILL)]

    kill_at = 0

    async def kill_after_enough() -> None:
        nonlocal kill_at
        await sent.enough.wait()
        await anyio.to_thread.run_sync(a.kill)
        kill_at = int(time.time() * 1000)

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_after_enough)
            await send_some(a, channel, todo[: BEFORE_KILL + SESSIONS], sent)
    assert kill_at, "the node was never killed"
    first = {m for m, _s, _i in todo[: BEFORE_KILL + SESSIONS]}
    rest = sorted(sent.unacked, key=lambda t: t[2]) + [
        t for t in todo[BEFORE_KILL + SESSIONS :] if t[0] not in first
    ]
    await send_some(b, channel, rest, sent)

    async def all_consumed() -> bool:
        done = await anyio.to_thread.run_sync(consumed, b)
        return all(m in done for m in acked)

    try:
        await wait_until(all_consumed, "every acked message consumed", within=120)
    except AssertionError:
        done = consumed(b)
        print("not consumed:", [(m, s) for m, (s, _at) in acked.items() if m not in done][:10])
        for line in b.log_lines():
            if '"level":"warning"' in line or '"level":"error"' in line or "Error" in line:
                print("node b:", line[:400])
        raise

    done = consumed(b)
    times = turn_times(b)
    answered = answer_times(b)
    overlaps = [
        (s, x, y) for s, ts in times.items() for x, y in itertools.pairwise(ts) if y[0] < x[1]
    ]
    out_of_order = consumed_in_order(b)
    # Each session with messages acked before the kill and not answered then: from the
    # kill to the end of the turn that took the oldest of them (the session answered
    # again; the rest of its backlog follows at the session's own pace).
    waiting = {m: s for m, (s, at) in acked.items() if at <= kill_at < answered.get(m, 0)}
    first_answer: dict[str, int] = {}
    for m, s in waiting.items():
        first_answer[s] = min(first_answer.get(s, answered[m]), answered[m])
    slowest, session = max(((end - kill_at, s) for s, end in first_answer.items()), default=(0, ""))
    if session:  # where the slowest session's wait went, from the kill (ms)
        oldest = min((m for m, s in waiting.items() if s == session), key=lambda m: acked[m][1])
        row = query(
            b,
            "SELECT q.created_at, q.handed_at, t.started_at, t.completed_at FROM queue_items q"
            " JOIN inbound i ON i.item_id = q.id JOIN messages m ON m.msg_id = i.msg_id"
            " JOIN turns t ON t.id = m.turn_id AND t.status = 'completed' WHERE i.msg_id = ?",
            oldest,
        )
        print(
            "slowest:", session, [[None if v is None else int(v) - kill_at for v in r] for r in row]
        )
    drained = max((answered[m] - kill_at for m in waiting), default=0)
    report: dict[str, Any] = {
        "acked": len(acked),
        "acked_before_kill": sum(1 for _s, at in acked.values() if at <= kill_at),
        "resent_to_the_other_node": len(sent.unacked),
        "lost": [m for m in acked if m not in done],
        "twice": [m for m, n in done.items() if m in acked and n > 1],
        "out_of_order": out_of_order,
        "overlaps": overlaps,
        "messages_waiting_at_the_kill": len(waiting),
        "sessions_waiting_at_the_kill": len(first_answer),
        "all_waiting_answered_after_ms": drained,
        "slowest_answer_after_kill_ms": slowest,
    }
    for m in report["twice"][:3]:
        print(
            "consumed twice:",
            m,
            query(
                b,
                "SELECT t.id, t.status, t.reason, t.parent_id, t.started_at - ?, t.completed_at - ?"
                " FROM messages x JOIN turns t ON t.id = x.turn_id"
                " WHERE x.msg_id = ? AND x.role = 'user'",
                kill_at,
                kill_at,
                m,
            ),
            query(b, "SELECT id, channel, item_id FROM inbound WHERE msg_id = ?", m),
        )
    if report["twice"]:
        await tell_signals(cluster.nodes[1], report["twice"][:2])
    print("failover:", report)
    assert not report["lost"] and not report["twice"], report
    assert not report["out_of_order"] and not report["overlaps"], report
    # The 10 s bound is the aim on this 2-core machine; when the machine runs twice as much
    # as its cores (the whole suite in parallel: 6 workers on 2 cores), the same run is
    # allowed twice as long, and says so (bench.failover measures the bound by itself).
    within = ANSWERED_WITHIN_MS
    if os.getloadavg()[0] > 2 * (os.cpu_count() or 1):
        within *= 2
        print(f"load average {os.getloadavg()[0]:.1f}: allowing {within} ms")
    assert slowest <= within, report
