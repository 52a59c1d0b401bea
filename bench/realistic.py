"""Turns with an engine that takes as long as a real one: the benchmark for speed choices.

    .venv/bin/python -m bench.realistic [--sessions 1000] [--chunks 8] [--chunk-ms 4]
                                        [--rate 500] [--seconds 10] [--parts closed,rate]
                                        [--observe off|metrics|tracing]

The echo engine streams each reply in `--chunks` deltas with `--chunk-ms` between
them (8 x 4 ms: about 32 ms a turn, inside the 20-50 ms a hosted model's short
answer takes), so the broker's own cost is a fraction of each turn, as in
production. Adapters confirm every `deliver`. Two parts, each on its own daemon:

- closed: every one of `--sessions` sessions has one message outstanding at all
  times (a person waiting for the reply before writing again), for `--seconds`;
  turns/s, send-to-deliver p50/p99, and the CPU the daemon, its writer process
  and its trace exporter spend per turn. A closed loop's CPU a turn follows its
  throughput (part of the work is per second or per writer batch, not per
  turn), so it also shows the writer's jobs a commit and a turn, and this
  bench's own CPU (its adapters and OTLP receiver share the machine).
- rate: `--rate` messages/s offered, paced, round robin over the sessions;
  send-to-deliver p50/p99, what the broker adds to the engine's time, and CPU a
  turn as above; it is a fixed rate's figure only while the p50 stays near the
  engine's time (a backlog batches turns and lowers it).

A speed trick in the code stays only where it moves these numbers by 2% or more
(docs/performance.md); compare two versions as interleaved A/B runs.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
from anyio.streams.memory import MemoryObjectSendStream
from prometheus_client.parser import text_string_to_metric_families

from bench.turns import Adapters, cpu_s, pct, with_daemon
from tests.harness import DaemonProcess
from tests.integration.observe_servers import free_port, otlp_receiver
from wire.client import BrokerClient


def config(args: argparse.Namespace, otlp: str | None = None) -> dict[str, Any]:
    observe: dict[str, Any] = {}
    if args.observe == "metrics":
        observe["metrics"] = {"address": f"127.0.0.1:{free_port()}"}
    elif args.observe == "tracing":
        assert otlp is not None
        observe["tracing"] = {"otlp_endpoint": otlp}
    return {
        **observe,
        "log_level": "warning",
        "max_inflight": 4096,
        "engine": {"kind": "echo", "chunks": args.chunks, "delay_ms": args.chunk_ms},
        # A session's next message waits for its reply: followup, never interrupt.
        "queue": {"cap": 1_000_000, "debounce_ms": 0, "idle_stop_s": 60.0},
    } | ({"ledger": {"key_file": args.key_file}} if args.key_file else {})


async def writer_pid(daemon: DaemonProcess) -> int | None:
    async with await BrokerClient.connect(daemon.socket) as op:
        pid = (await op.op("health")).get("writer_pid")
    return int(pid) if pid else None


async def writer_batches(daemon: DaemonProcess) -> tuple[int, int]:
    """The writer's commits and the jobs they held, since the daemon started."""
    async with await BrokerClient.connect(daemon.socket) as op:
        health = await op.op("health")
    return int(health["writer_commits"]), int(health["writer_jobs"])


def cpu_of(daemon: DaemonProcess, writer: int | None) -> tuple[float, float, float]:
    """CPU seconds of the daemon, its writer, and its trace exporter (0 when none)."""
    assert daemon.proc is not None
    exporter = exporter_pid(daemon.proc.pid)
    return (
        cpu_s(daemon.proc.pid),
        cpu_s(writer) if writer else 0.0,
        cpu_s(exporter) if exporter else 0.0,
    )


def exporter_pid(daemon: int) -> int | None:
    """The daemon's trace exporter child (broker/observe/trace_export.py), if it has one."""
    for task in Path(f"/proc/{daemon}/task").iterdir():
        for child in (task / "children").read_text().split():
            if b"trace_export" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
    return None


async def warm_up(ads: Adapters, sessions: int) -> None:
    """One message to every session, so each has its actor and a turn in its history."""
    for start in range(0, sessions, 64):
        batch = range(start, min(sessions, start + 64))
        await ads.send_inbound(0, ((f"warm{i}", i) for i in batch))
    await ads.wait_delivered(sessions, within_s=120)


class Waiting(Adapters):
    """Adapters that also list, in order, the msg_ids answered since the last look."""

    answered: list[str]

    def _frame(self, frame: dict[str, Any], confirm: MemoryObjectSendStream[str]) -> None:
        if frame["type"] == "deliver":
            self.answered.extend(m for m in frame["in_reply_to"] if m not in self.delivered_at)
        super()._frame(frame, confirm)


async def closed_loop(daemon: DaemonProcess, args: argparse.Namespace) -> dict[str, Any]:
    sessions = args.sessions
    ads = Waiting(daemon.socket, anyio.Semaphore(1 << 30))
    ads.answered = []
    writer = await writer_pid(daemon)
    async with anyio.create_task_group() as tg:
        await ads.open(tg, args.connections)
        await warm_up(ads, sessions)
        sent_next = [0] * sessions

        async def send(session: int) -> None:
            msg_id = f"c{session}-{sent_next[session]}"
            sent_next[session] += 1
            ads.sent_at[msg_id] = time.perf_counter()
            await ads.send_inbound(session % args.connections, [(msg_id, session)])

        ads.answered.clear()
        done_before = ads.expected_delivered
        batches0 = await writer_batches(daemon)
        cpu0 = cpu_of(daemon, writer)
        own0 = time.process_time()
        t0 = time.perf_counter()
        for s in range(sessions):
            await send(s)
        while time.perf_counter() - t0 < args.seconds:
            with anyio.move_on_after(1.0):
                await ads.progress.wait()
            ads.progress = anyio.Event()
            fresh, ads.answered = ads.answered, []
            for msg_id in fresh:
                await send(int(msg_id[1:].split("-")[0]))
        elapsed = time.perf_counter() - t0
        cpu1 = cpu_of(daemon, writer)
        own = time.process_time() - own0
        turns = ads.expected_delivered - done_before
        batches1 = await writer_batches(daemon)
        await ads.close()
        tg.cancel_scope.cancel()
    deliver = [ads.delivered_at[m] - t for m, t in ads.sent_at.items() if m in ads.delivered_at]
    return {
        "turns": turns,
        "tps": turns / elapsed,
        "p50": pct(deliver, 50),
        "p99": pct(deliver, 99),
        "daemon_us": (cpu1[0] - cpu0[0]) / max(1, turns) * 1e6,
        "writer_us": (cpu1[1] - cpu0[1]) / max(1, turns) * 1e6,
        "exporter_us": (cpu1[2] - cpu0[2]) / max(1, turns) * 1e6,
        "bench_us": own / max(1, turns) * 1e6,
        "commits": batches1[0] - batches0[0],
        "jobs": batches1[1] - batches0[1],
        "errors": len(ads.errors),
    }


def commit_buckets(daemon: DaemonProcess) -> dict[float, float]:
    """`broker_ledger_commit_seconds`' cumulative buckets (le → count); none without
    `[metrics]`."""
    address = daemon.config.get("metrics", {}).get("address")
    if not address:
        return {}
    text = httpx.get(f"http://{address}/metrics", timeout=5).text
    return {
        float(s.labels["le"]): s.value
        for f in text_string_to_metric_families(text)
        if f.name == "broker_ledger_commit_seconds"
        for s in f.samples
        if s.name.endswith("_bucket")
    }


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> str:
    """The bucket bound under which a `q` share of the batches committed between the two
    scrapes did: 'p99 <= 5 ms of 1234 batches'."""
    grown = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    if not grown or grown[-1][1] <= 0:
        return "no batches"
    total = grown[-1][1]
    bound = next(le for le, n in grown if n >= q * total)
    return f"<= {bound * 1000:g} ms of {total:.0f} batches"


async def at_rate(daemon: DaemonProcess, args: argparse.Namespace) -> dict[str, Any]:
    total = int(args.rate * args.seconds)
    ads = Adapters(daemon.socket, anyio.Semaphore(1 << 30))
    writer = await writer_pid(daemon)
    async with anyio.create_task_group() as tg:
        await ads.open(tg, args.connections)
        await warm_up(ads, args.sessions)
        buckets = commit_buckets(daemon)
        cpu0 = cpu_of(daemon, writer)
        t0 = time.perf_counter()
        for i in range(total):
            delay = t0 + i / args.rate - time.perf_counter()
            if delay > 0:
                await anyio.sleep(delay)
            msg_id = f"r{i}"
            ads.sent_at[msg_id] = time.perf_counter()
            await ads.send_inbound(i % args.connections, [(msg_id, i % args.sessions)])
        offered = total / (time.perf_counter() - t0)
        await ads.wait_delivered(args.sessions + total, within_s=120)
        cpu1 = cpu_of(daemon, writer)
        commits = commit_buckets(daemon)
        await ads.close()
        tg.cancel_scope.cancel()
    deliver = [ads.delivered_at[m] - t for m, t in ads.sent_at.items() if m in ads.delivered_at]
    engine_ms = args.chunks * args.chunk_ms
    return {
        "offered": offered,
        "missing": total - len(deliver),
        "p50": pct(deliver, 50),
        "p99": pct(deliver, 99),
        "added_p50": pct(deliver, 50) - engine_ms,
        "daemon_us": (cpu1[0] - cpu0[0]) / max(1, len(deliver)) * 1e6,
        "writer_us": (cpu1[1] - cpu0[1]) / max(1, len(deliver)) * 1e6,
        "exporter_us": (cpu1[2] - cpu0[2]) / max(1, len(deliver)) * 1e6,
        "errors": len(ads.errors),
        "commit_p99": bucket_quantile(buckets, commits, 0.99) if commits else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=8, help="deltas per reply")
    parser.add_argument("--chunk-ms", type=int, default=4, help="engine time per delta")
    parser.add_argument("--rate", type=int, default=500, help="offered msg/s, rate part")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--parts", default="closed,rate")
    parser.add_argument("--key-file", default="", help="ledger.key_file: an encrypted ledger")
    parser.add_argument(
        "--observe",
        choices=("off", "metrics", "tracing"),
        default="off",
        help="serve [metrics], or send [tracing] to a local OTLP receiver",
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        otlp = stack.enter_context(otlp_receiver()).url if args.observe == "tracing" else None
        run(args, otlp)


def run(args: argparse.Namespace, otlp: str | None) -> None:
    parts = {p.strip() for p in args.parts.split(",")}
    engine_ms = args.chunks * args.chunk_ms
    print(
        f"echo engine: {args.chunks} deltas, {args.chunk_ms} ms apart (~{engine_ms} ms a turn);"
        f" {args.sessions} sessions; {args.connections} adapter connections;"
        f" observe: {args.observe}"
    )
    if "closed" in parts:
        c = with_daemon(config(args, otlp), lambda d: closed_loop(d, args))
        print(f"closed loop, one message outstanding per session, {args.seconds:g} s")
        print(f"    turns/s                         {c['tps']:>10.0f}   ({c['turns']} turns)")
        print(f"    send->deliver p50 / p99 (ms)    {c['p50']:>10.1f} / {c['p99']:.1f}")
        print(
            f"    CPU per turn: daemon / writer   {c['daemon_us']:>10.0f} / {c['writer_us']:.0f} µs"
        )
        print(f"    CPU per turn: trace exporter    {c['exporter_us']:>10.0f} µs")
        total = c["daemon_us"] + c["writer_us"] + c["exporter_us"]
        print(f"    CPU per turn: all processes     {total:>10.0f} µs")
        print(f"    CPU per turn: this bench        {c['bench_us']:>10.0f} µs (adapters, receiver)")
        per_commit, per_turn = c["jobs"] / max(1, c["commits"]), c["jobs"] / max(1, c["turns"])
        print(f"    writer jobs a commit / a turn   {per_commit:>10.1f} / {per_turn:.2f}")
        if c["errors"]:
            print(f"    errors: {c['errors']}")
    if "rate" in parts:
        r = with_daemon(config(args, otlp), lambda d: at_rate(d, args))
        print(f"offered {args.rate} msg/s for {args.seconds:g} s (achieved {r['offered']:.0f})")
        print(f"    send->deliver p50 / p99 (ms)    {r['p50']:>10.1f} / {r['p99']:.1f}")
        print(f"    added to the engine's time, p50 {r['added_p50']:>10.1f} ms")
        print(
            f"    CPU per turn: daemon / writer   {r['daemon_us']:>10.0f} / {r['writer_us']:.0f} µs"
        )
        print(f"    CPU per turn: trace exporter    {r['exporter_us']:>10.0f} µs")
        total = r["daemon_us"] + r["writer_us"] + r["exporter_us"]
        print(f"    CPU per turn: all processes     {total:>10.0f} µs")
        if r["commit_p99"]:
            print(f"    writer batch commit p99         {r['commit_p99']}")
        if r["missing"] or r["errors"]:
            print(f"    missing replies: {r['missing']}; errors: {r['errors']}")


if __name__ == "__main__":
    main()
