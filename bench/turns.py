"""Turn benchmark: turns per second, inbound-to-deliver latency and memory per session.

    .venv/bin/python -m bench.turns [--sessions 1000] [--messages 30000] [--rate 1000[,250…]]
                                    [--memory-sessions 10000] [--parts tput,latency,memory]

Each part runs its own daemon (echo engine, chunks=1) on a temporary ledger, with
adapters that confirm every `deliver`:

- tput: `--messages` messages with queue_mode followup (one message a turn) over
  `--sessions` sessions, pipelined over `--connections` connections with at most
  `--window` un-acked; turns/s end to end (first send to last deliver) and from the
  ledger (completed turns over first start to last completion).
- latency: `--rate` messages/s offered, paced, round robin over `--sessions` idle
  sessions for `--seconds`; time from the send to the `deliver` that answers it.
  Each session first gets one message (its actor starts) unless `--cold`.
- memory: one message to each of `--memory-sessions` sessions whose turns last
  `--turn-ms` (longer than the ingest, so every session has a turn in flight at
  once); VmRSS of the daemon at start, with all of them active, once answered, and
  after they went idle (`queue.idle_stop_s`); `--waves` times over the same sessions,
  so a second wave shows whether the memory of retired actors is reused.

Targets from the issue: >= 3,000 turns/s, p99 < 10 ms, idle sessions hold no actor.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from tests.harness import DaemonProcess
from wire.client import BrokerClient

CHANNEL = "bench"
CLOSED = (anyio.ClosedResourceError, anyio.EndOfStream, anyio.BrokenResourceError)


async def drain(receive: MemoryObjectReceiveStream[Any]) -> list[Any]:
    """Everything already waiting in a memory stream, without blocking."""
    out = []
    while True:
        try:
            out.append(receive.receive_nowait())
        except anyio.WouldBlock:
            return out


def inbound(msg_id: str, session: int, mode: str = "followup") -> bytes:
    return (
        orjson.dumps(
            {
                "type": "inbound",
                "req": msg_id,
                "msg_id": msg_id,
                "sender_id": f"user-{session}",
                "peer_kind": "dm",
                "text": f"{msg_id}: the quick brown fox",
                "queue_mode": mode,
            }
        )
        + b"\n"
    )


@dataclass
class Adapters:
    """Adapter connections that record acks and delivers and confirm every deliver."""

    socket: Path
    window: anyio.Semaphore
    sent: set[str] = field(default_factory=set)  # msg_ids sent through these connections
    sent_at: dict[str, float] = field(default_factory=dict)
    acked_at: dict[str, float] = field(default_factory=dict)
    delivered_at: dict[str, float] = field(default_factory=dict)
    statuses: Counter[str] = field(default_factory=Counter)
    errors: list[dict[str, Any]] = field(default_factory=list)
    clients: list[BrokerClient] = field(default_factory=list)
    locks: list[anyio.Lock] = field(default_factory=list)
    progress: anyio.Event = field(default_factory=anyio.Event)
    expected_delivered: int = 0  # delivered msg_ids this instance sent (not resends of others)

    async def open(self, tg: anyio.abc.TaskGroup, count: int) -> None:
        for n in range(count):
            client = await BrokerClient.connect(self.socket, role="adapter", channel=CHANNEL)
            self.clients.append(client)
            self.locks.append(anyio.Lock())
            send, receive = anyio.create_memory_object_stream[str](1 << 20)
            tg.start_soon(self._read, client, send)
            tg.start_soon(self._confirm, n, receive)

    async def close(self) -> None:
        """Close the connections (their readers end quietly); call before cancelling them:
        cancelling a pending receive on asyncio can race the socket turning readable."""
        for client in self.clients:
            await client.aclose()

    async def send_inbound(self, conn_no: int, msgs: Iterable[tuple[str, int]]) -> None:
        """Send (msg_id, session number) messages in one write."""
        batch = list(msgs)
        self.sent.update(m for m, _ in batch)
        await self.send(conn_no, b"".join(inbound(m, n) for m, n in batch))

    async def send(self, conn_no: int, data: bytes) -> None:
        async with self.locks[conn_no]:
            await self.clients[conn_no].send_raw(data)

    async def _read(self, client: BrokerClient, confirm: MemoryObjectSendStream[str]) -> None:
        with contextlib.suppress(*CLOSED):
            while True:
                self._frame(await client.recv(), confirm)

    def _frame(self, frame: dict[str, Any], confirm: MemoryObjectSendStream[str]) -> None:
        now = time.perf_counter()
        kind = frame["type"]
        if kind == "ack":
            self.acked_at[frame["msg_id"]] = now
            self.window.release()
        elif kind == "deliver":
            for msg_id in frame["in_reply_to"]:
                if msg_id in self.sent and msg_id not in self.delivered_at:
                    self.delivered_at[msg_id] = now
                    self.expected_delivered += 1
            self.statuses[frame["status"]] += 1
            confirm.send_nowait(frame["out_id"])
        elif kind == "error":
            self.errors.append(frame)
            self.window.release()
        self.progress.set()

    async def _confirm(self, conn_no: int, receive: MemoryObjectReceiveStream[str]) -> None:
        with contextlib.suppress(*CLOSED):
            async for first in receive:
                out_ids = [first, *await drain(receive)]
                await self.send(
                    conn_no,
                    b"".join(
                        orjson.dumps({"type": "delivered", "out_id": o}) + b"\n" for o in out_ids
                    ),
                )

    async def wait_delivered(self, count: int, within_s: float) -> None:
        await self._wait(lambda: self.expected_delivered >= count, within_s)

    async def wait_acked(self, count: int, within_s: float) -> None:
        await self._wait(lambda: len(self.acked_at) + len(self.errors) >= count, within_s)

    async def _wait(self, done: Callable[[], bool], within_s: float) -> None:
        with anyio.move_on_after(within_s):
            while not done():
                await self.progress.wait()
                self.progress = anyio.Event()


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB from /proc/<pid>/status."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values["VmRSS"], values["VmHWM"]


def daemon_config(args: argparse.Namespace, delay_ms: int, idle_stop_s: float) -> dict[str, Any]:
    return {
        "log_level": "warning",
        "max_inflight": max(1024, args.window * 2),
        "engine": {"kind": "echo", "delay_ms": delay_ms, "chunks": 1},
        "ledger": {"writer": args.writer},
        "queue": {"cap": 1_000_000, "debounce_ms": 0, "idle_stop_s": idle_stop_s},
    }


def with_daemon(
    config: dict[str, Any], body: Callable[[DaemonProcess], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="bt-", dir="/tmp") as tmp,
        DaemonProcess(Path(tmp), config) as daemon,
    ):

        async def main() -> dict[str, Any]:
            return await body(daemon)

        return anyio.run(main, backend_options={"use_uvloop": True})


# -- (a) throughput -------------------------------------------------------------------


async def throughput(daemon: DaemonProcess, args: argparse.Namespace) -> dict[str, Any]:
    total, sessions, conns = args.messages, args.sessions, args.connections
    frames = [inbound(f"t{i}", i % sessions) for i in range(total)]
    ads = Adapters(daemon.socket, window(args.window))
    ads.sent.update(f"t{i}" for i in range(total))
    async with anyio.create_task_group() as tg:
        await ads.open(tg, conns)
        t0 = time.perf_counter()
        cpu0 = own_cpu_s()
        chunk = 64
        for start in range(0, total, chunk):
            for _ in range(min(chunk, total - start)):
                await ads.window.acquire()
            await ads.send((start // chunk) % conns, b"".join(frames[start : start + chunk]))
        await ads.wait_delivered(total, within_s=300)
        t1 = time.perf_counter()
        client_us = (own_cpu_s() - cpu0) / total * 1e6
        await ads.close()
        tg.cancel_scope.cancel()
    with daemon.db() as db:
        n, first, last = db.execute(
            "SELECT count(*), min(started_at), max(completed_at) FROM turns"
            " WHERE status = 'completed'"
        ).fetchone()
    db.close()
    last_ack = max(ads.acked_at.values(), default=t1)
    return {
        "turns": ads.expected_delivered,
        "errors": len(ads.errors),
        "e2e": ads.expected_delivered / (t1 - t0),
        "ledger": n / max(0.001, (last - first) / 1000),
        "acks": len(ads.acked_at) / (last_ack - t0),
        "seconds": t1 - t0,
        "client_us": client_us,
    }


# -- (b) latency at an offered rate ---------------------------------------------------


async def latency(daemon: DaemonProcess, args: argparse.Namespace, rate: int) -> dict[str, Any]:
    total = int(rate * args.seconds)
    conns = args.connections
    ads = Adapters(daemon.socket, anyio.Semaphore(1 << 30))
    warm = 0 if args.cold else args.sessions
    async with anyio.create_task_group() as tg:
        await ads.open(tg, conns)
        for start in range(0, warm, 64):  # every session gets its actor first
            batch = range(start, min(warm, start + 64))
            await ads.send_inbound(0, ((f"warm{i}", i) for i in batch))
        await ads.wait_delivered(warm, within_s=60)
        t0 = time.perf_counter()
        for i in range(total):
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                await anyio.sleep(delay)
            msg_id = f"l{i}"
            ads.sent_at[msg_id] = time.perf_counter()
            await ads.send_inbound(i % conns, [(msg_id, i % args.sessions)])
        offered = total / (time.perf_counter() - t0)
        await ads.wait_delivered(warm + total, within_s=60)
        await ads.close()
        tg.cancel_scope.cancel()
    deliver = [ads.delivered_at[m] - t for m, t in ads.sent_at.items() if m in ads.delivered_at]
    ack = [ads.acked_at[m] - t for m, t in ads.sent_at.items() if m in ads.acked_at]
    return {
        "offered": offered,
        "n": len(deliver),
        "missing": total - len(deliver),
        "p50": pct(deliver, 50),
        "p99": pct(deliver, 99),
        "max": pct(deliver, 100),
        "ack_p50": pct(ack, 50),
        "ack_p99": pct(ack, 99),
    }


# -- (c) memory -----------------------------------------------------------------------


async def busy_sessions(daemon: DaemonProcess) -> int:
    """Sessions whose state is not `idle`: a lower bound on live actors (those mid-turn)."""
    async with await BrokerClient.connect(daemon.socket) as op:
        rows = await op.op("sessions.list", limit=10_000)
    return sum(1 for r in rows if r["state"] != "idle")


def window(size: int) -> anyio.Semaphore:
    """The load generator's window of un-acked frames. `fast_acquire`: a plain
    acquire yields to the event loop every time, which cost the generator half
    its CPU (which it shares with the daemon's 2 cores) for nothing."""
    return anyio.Semaphore(size, fast_acquire=True)


def own_cpu_s() -> float:
    """User + system CPU seconds of this process (the load generator)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def cpu_share(pid: int, seconds: float) -> float:
    """Share of one core the process used over the next `seconds`."""
    before = cpu_s(pid)
    await anyio.sleep(seconds)
    return (cpu_s(pid) - before) / seconds


async def live_actors(daemon: DaemonProcess) -> str:
    """The daemon's live actor count if `health` reports one (as `actors`), else "n/a"."""
    async with await BrokerClient.connect(daemon.socket) as op:
        health = await op.op("health")
    return str(health["actors"]) if "actors" in health else "n/a"


def running_items(daemon: DaemonProcess) -> int:
    """Items the ledger shows running: turns in flight, read from the file, not the daemon."""
    conn = daemon.db()
    try:
        return int(
            conn.execute("SELECT count(*) FROM queue_items WHERE status = 'running'").fetchone()[0]
        )
    finally:
        conn.close()


async def most_running(
    daemon: DaemonProcess, total: int, pid: int, within_s: float
) -> tuple[int, int]:
    """Poll until every session has its turn in flight (or time is up): (most, VmRSS then)."""
    best = (running_items(daemon), rss_kib(pid)[0])
    with anyio.move_on_after(within_s):
        while best[0] < total:
            await anyio.sleep(0.2)
            best = max(best, (running_items(daemon), rss_kib(pid)[0]))
    return best


async def wave(daemon: DaemonProcess, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    """One message to each session; measure once all are acked, then once all are answered."""
    total = args.memory_sessions
    ads = Adapters(daemon.socket, window(args.window))
    assert daemon.proc is not None
    pid = daemon.proc.pid
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        await ads.open(tg, args.connections)
        t0 = time.perf_counter()
        for start in range(0, total, 64):
            batch = range(start, min(total, start + 64))
            for _ in batch:
                await ads.window.acquire()
            await ads.send_inbound(
                (start // 64) % args.connections, ((f"{tag}{i}", i) for i in batch)
            )
        await ads.wait_acked(total, within_s=120)
        out["ingest_s"] = time.perf_counter() - t0
        out["active_busy"], out["active_rss"] = await most_running(
            daemon, total, pid, within_s=args.turn_ms / 2000
        )
        out["active_s"] = time.perf_counter() - t0
        out["waiting_cpu"] = await cpu_share(pid, min(3.0, args.turn_ms / 10_000))
        out["waiting_rss"] = rss_kib(pid)[0]
        await ads.wait_delivered(total, within_s=args.turn_ms / 1000 + 120)
        out["answered"] = ads.expected_delivered
        out["done_rss"], _ = rss_kib(pid)
        await ads.close()
        tg.cancel_scope.cancel()
    return out


def ledger_mib(daemon: DaemonProcess) -> float:
    paths = (daemon.ledger, daemon.ledger.with_name(daemon.ledger.name + "-wal"))
    return sum(p.stat().st_size for p in paths if p.exists()) / (1 << 20)


async def memory(daemon: DaemonProcess, args: argparse.Namespace) -> dict[str, Any]:
    assert daemon.proc is not None
    pid = daemon.proc.pid
    rows: list[tuple[str, int, str]] = [("at start", rss_kib(pid)[0], "")]
    for n in range(args.waves):
        w = await wave(daemon, args, f"w{n}-")
        busy = w["active_busy"]
        per = (w["active_rss"] - rows[0][1]) * 1024 / max(1, busy)
        rows.append(
            (
                f"wave {n + 1}: all acked, turns in flight",
                w["active_rss"],
                f"{busy} of {args.memory_sessions} turns running {w['active_s']:.1f}s after"
                f" the first send (~{per / 1024:.1f} KiB each over start); ingest"
                f" {w['ingest_s']:.1f}s",
            )
        )
        rows.append(
            (
                f"wave {n + 1}: turns waiting on the engine",
                w["waiting_rss"],
                f"daemon CPU {w['waiting_cpu']:.0%} of a core with nothing to do but wait",
            )
        )
        rows.append((f"wave {n + 1}: all answered", w["done_rss"], f"{w['answered']} answered"))
        await anyio.sleep(args.idle_stop_s * 2 + 1)  # an idle actor retires within ~2 periods
        idle = await busy_sessions(daemon)
        actors = await live_actors(daemon)
        rows.append(
            (
                f"wave {n + 1}: idle {args.idle_stop_s * 2 + 1:.0f}s later",
                rss_kib(pid)[0],
                f"{idle} sessions not idle, live actors: {actors}, "
                f"ledger {ledger_mib(daemon):.0f} MiB",
            )
        )
    return {"rows": rows, "hwm": rss_kib(pid)[1]}


# -- main -----------------------------------------------------------------------------


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def report_memory(r: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"(c) memory: {args.memory_sessions} sessions, one message each, turns of "
        f"{args.turn_ms} ms, idle_stop_s={args.idle_stop_s} (VmRSS of the daemon)"
    )
    for label, kib, note in r["rows"]:
        print(f"    {label:<44}{mib(kib):>12}   {note}")
    print(f"    {'peak (VmHWM)':<44}{mib(r['hwm']):>12}")
    print(
        "    live actors: n/a means not observable from outside: `health` does not report"
        " them and sessions.list shows an idle actor and no actor alike as `idle`. RSS includes"
        " SQLite's page cache (cache_size 64 MiB a connection), which grows with the ledger."
    )


def report_latency(rate: int, lat: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"(b) latency, {rate} msg/s offered ({lat['offered']:.0f} achieved) for "
        f"{args.seconds}s over {args.sessions} {'cold' if args.cold else 'warm'} sessions,"
        " delay_ms=0"
    )
    print(
        f"    {'send -> deliver p50 / p99 / max ms':<44}"
        f"{lat['p50']:>8.2f} /{lat['p99']:>7.2f} /{lat['max']:>7.2f}"
        f"   ({lat['n']} answered, {lat['missing']} missing)"
    )
    print(f"    {'send -> ack p50 / p99 ms':<44}{lat['ack_p50']:>8.2f} /{lat['ack_p99']:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--window", type=int, default=512, help="un-acked frames in all")
    parser.add_argument(
        "--rate", default="1000", help="offered msg/s, latency part (comma-separated for several)"
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--cold", action="store_true", help="latency part: no warm-up message per session first"
    )
    parser.add_argument("--memory-sessions", type=int, default=10_000)
    parser.add_argument("--turn-ms", type=int, default=30_000, help="turn length, memory part")
    parser.add_argument("--waves", type=int, default=2, help="memory part: waves of messages")
    parser.add_argument("--idle-stop-s", type=float, default=1.0)
    parser.add_argument("--parts", default="tput,latency,memory")
    parser.add_argument(
        "--writer",
        choices=("process", "thread"),
        default="process",
        help="ledger.writer",
    )
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",")}
    print(
        f"echo engine, chunks=1; {args.connections} adapter connections confirming every"
        " deliver; queue_mode followup"
    )
    if "tput" in parts:
        t = with_daemon(daemon_config(args, 0, 30.0), lambda d: throughput(d, args))
        print(
            f"(a) throughput, {args.messages} messages over {args.sessions} sessions, "
            f"window {args.window}, delay_ms=0"
        )
        print(
            f"    {'turns/s end to end':<44}{t['e2e']:>12.0f}   ({t['turns']} turns in "
            f"{t['seconds']:.1f}s, {t['errors']} errors)"
        )
        print(f"    {'turns/s in the ledger (first start..last end)':<44}{t['ledger']:>12.0f}")
        print(f"    {'acks/s over the same run':<44}{t['acks']:>12.0f}")
        print(f"    {'load generator CPU µs per message':<44}{t['client_us']:>12.1f}")
    if "latency" in parts:
        for rate in (int(r) for r in args.rate.split(",")):

            def at_rate(d: DaemonProcess, r: int = rate) -> Awaitable[dict[str, Any]]:
                return latency(d, args, r)

            report_latency(rate, with_daemon(daemon_config(args, 0, 30.0), at_rate), args)
    if "memory" in parts:
        mem = with_daemon(
            daemon_config(args, args.turn_ms, args.idle_stop_s), lambda d: memory(d, args)
        )
        report_memory(mem, args)


if __name__ == "__main__":
    main()
