"""Failover under repeated node deaths: 3 broker nodes on one PostgreSQL ledger and one
Temporal dev server, 100 sessions under load, 20 kills -9 of a node (each restarted).

    .venv/bin/python -m bench.failover [--nodes 3] [--sessions 100] [--kills 20]
                                       [--every 6] [--pause-s 15] [--delay-ms 20]

Every sender sends a message, waits for its ack and pauses `--pause-s`; it has a
home node and its own adapter connection, and when that node dies it resends what
it never got an ack for through the next live node (the same msg_id), as an adapter
would. Kills go round the nodes. Afterwards, from the
ledger: the four buckets (acked and lost, consumed twice, consumed out of the
ledger's order, a session's turns overlapping) and, per kill, the time from the kill
until every session that had work acked before it was answered again (p50, max).
This is a benchmark, not a test: the machine is shared, read the load average.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from broker.runtime.temporal.devserver import DevServer
from tests.cluster import Cluster
from tests.harness import DaemonProcess
from tests.integration.cluster.test_failover import consumed_in_order, send_retrying
from tests.integration.cluster.test_kill_node import answer_times, consumed, turn_times
from tests.integration.wire import Adapter, query, uniq, wait_until
from wire.client import BrokerError

RESTART_WITHIN_S = 180  # a killed node's restart, on a machine far past its cores
GONE = (BrokerError, OSError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError)


class Load:
    def __init__(self, nodes: list[DaemonProcess], sessions: int, pause_s: float) -> None:
        self.pause_s = pause_s
        self.nodes = nodes
        self.alive = [True] * len(nodes)
        self.senders = [uniq("u") for _ in range(sessions)]
        self.channel = uniq("chat")
        self.acked: dict[str, tuple[str, int]] = {}
        self.stop = anyio.Event()

    async def sender(self, n: int) -> None:
        sender, home = self.senders[n], n % len(self.nodes)
        adapter: Adapter | None = None
        for k in itertools.count():
            if self.stop.is_set():
                break
            msg = uniq("m")
            while True:  # this message until some node acks it
                node = next(
                    (home + j) % len(self.nodes)
                    for j in range(len(self.nodes))
                    if self.alive[(home + j) % len(self.nodes)]
                )
                try:
                    if adapter is None:
                        adapter = await Adapter.connect(self.nodes[node], self.channel)
                    ack = await send_retrying(adapter, msg, f"hello {k}", sender)
                    break
                except GONE:
                    if adapter is not None:
                        with anyio.CancelScope(shield=True):
                            await adapter.aclose()
                    adapter = None
                    await anyio.sleep(0.2)
            self.acked[msg] = (str(ack["session"]), int(time.time() * 1000))
            await anyio.sleep(self.pause_s)
        if adapter is not None:
            await adapter.aclose()


async def run(args: argparse.Namespace) -> None:
    from ledger.postgres import devcluster

    with tempfile.TemporaryDirectory(prefix="bfo-", dir="/tmp") as tmp:
        pg = devcluster.create(durable=False)
        temporal = DevServer(Path(tmp) / "temporal").start()
        try:
            dsn = devcluster.fresh_database(pg, "failover", devcluster.template_database(pg))
            config = {
                "log_level": "warning",
                "queue": {"debounce_ms": 0},
                "engine": {"chunks": 1, "delay_ms": args.delay_ms},
            }
            cluster = Cluster(Path(tmp) / "c", dsn, temporal.address, args.nodes, config).start()
            try:
                await measure(cluster, args)
            finally:
                cluster.stop()
        finally:
            temporal.stop()
            pg.destroy()


async def measure(cluster: Cluster, args: argparse.Namespace) -> None:
    load = Load(cluster.nodes, args.sessions, args.pause_s)
    kills: list[int] = []

    async def killer() -> None:
        await anyio.sleep(args.every)
        for k in range(args.kills):
            n = k % len(cluster.nodes)
            victim = cluster.nodes[n]
            load.alive[n] = False
            await anyio.to_thread.run_sync(victim.kill)
            kills.append(int(time.time() * 1000))
            await anyio.sleep(1.0)
            restart = functools.partial(victim.start, timeout=RESTART_WITHIN_S)
            await anyio.to_thread.run_sync(restart)
            load.alive[n] = True
            await anyio.sleep(max(0.0, args.every - 1.0))
        load.stop.set()

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        for n in range(args.sessions):
            tg.start_soon(load.sender, n)
        tg.start_soon(killer)
    first = cluster.nodes[0]
    try:
        await wait_until(
            lambda: anyio.to_thread.run_sync(lambda: all(m in consumed(first) for m in load.acked)),
            "every acked message consumed",
            within=args.drain_s,
        )
    except AssertionError:
        done = consumed(first)
        left = [m for m in load.acked if m not in done]
        print(f"not consumed after {args.drain_s:g} s: {len(left)}")
        for m in left[:8]:
            print(
                "  ",
                m,
                load.acked[m],
                query(
                    first,
                    "SELECT q.id, q.status, q.reason, q.turn_id, q.created_at, q.handed_at"
                    " FROM queue_items q JOIN inbound i ON i.item_id = q.id WHERE i.msg_id = ?",
                    m,
                ),
            )
    report(first, load.acked, kills, time.monotonic() - started)


def report(d: DaemonProcess, acked: dict[str, tuple[str, int]], kills: list[int], s: float) -> None:
    done = consumed(d)
    times = turn_times(d)
    answered = answer_times(d)
    overlaps = sum(1 for ts in times.values() for a, b in itertools.pairwise(ts) if b[0] < a[1])
    per_kill = []
    worst: list[tuple[int, int, str]] = []  # (wait ms, kill ms, session)
    for kill in kills:
        first: dict[str, int] = {}
        for m, (session, at) in acked.items():
            if at <= kill < answered.get(m, 0):
                first[session] = min(first.get(session, answered[m]), answered[m])
        per_kill.append(max((end - kill for end in first.values()), default=0))
        if first:
            session = max(first, key=lambda x: first[x])
            worst.append((first[session] - kill, kill, session))
    for wait, kill, session in sorted(worst, reverse=True)[:3]:
        explain(d, wait, kill, session, kills, times[session])
    for m in [m for m, n in done.items() if m in acked and n > 1][:3]:
        print(
            "consumed twice:",
            m,
            query(
                d,
                "SELECT t.id, t.status, t.reason, t.parent_id, t.started_at, t.completed_at,"
                " t.engine FROM messages x JOIN turns t ON t.id = x.turn_id"
                " WHERE x.msg_id = ? AND x.role = 'user'",
                m,
            ),
            query(d, "SELECT id, channel, item_id FROM inbound WHERE msg_id = ?", m),
        )
    print(f"load average {os.getloadavg()[0]:.1f}; {len(acked)} acked in {s:.0f} s")
    still_open = {
        str(r[0])
        for r in query(
            d,
            "SELECT i.msg_id FROM inbound i JOIN queue_items q ON q.id = i.item_id"
            " WHERE q.status IN ('queued', 'running')",
        )
    }
    print(f"acked and still waiting in the ledger at the end: {len(still_open & set(acked))}")
    print(
        f"buckets: lost {sum(1 for m in acked if m not in done and m not in still_open)},"
        f" twice {sum(1 for m, n in done.items() if m in acked and n > 1)},"
        f" out of order {len(consumed_in_order(d))}, overlapping turns {overlaps}"
    )
    print(
        f"answered again after a kill (ms): p50 {statistics.median(per_kill):.0f},"
        f" max {max(per_kill)}; per kill {per_kill}"
    )


def explain(
    d: DaemonProcess,
    wait: int,
    kill: int,
    session: str,
    kills: list[int],
    turns: list[tuple[int, int, str]],
) -> None:
    """Where a slow session's wait went: its items and turns around the kill, in ms
    from it, and the kills meanwhile."""
    print(f"slowest after the kill at {kill}: {session}, {wait} ms")
    print("  kills meanwhile (ms after):", [k - kill for k in kills if kill <= k <= kill + wait])
    items = query(
        d,
        "SELECT q.id, q.status, q.created_at, q.handed_at, q.reason FROM queue_items q"
        " WHERE q.session_label = ? AND q.created_at BETWEEN ? AND ? ORDER BY q.seq",
        session,
        kill - 30_000,
        kill + wait,
    )
    for item_id, status, created, handed, reason in items:
        handed_ms = None if handed is None else int(handed) - kill
        print(
            f"  item {item_id} {status} {reason} created {int(created) - kill} handed {handed_ms}"
        )
    for start, end, status in turns:
        if kill - 30_000 <= start <= kill + wait:
            print(f"  turn {status} {start - kill}..{end - kill}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--every", type=float, default=6.0, help="seconds between kills")
    # 100 senders at one message per 15 s: about 7 msg/s, well within what a loaded 2-core
    # machine serves, so the figures measure failover, not a growing backlog.
    parser.add_argument("--pause-s", type=float, default=15.0, help="a sender's pause")
    parser.add_argument("--drain-s", type=float, default=300, help="bound of the final drain")
    parser.add_argument("--delay-ms", type=int, default=20, help="the echo engine's delay")
    anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
