"""Other people's ack latency while the daemon erases a person of many messages.

    .venv/bin/python -m bench.erasure_acks [--people 2000] [--turns 50]
                                           [--target-turns 5000] [--rate 1000] [--keep FILE]

Builds the ledger of bench.forgetting (the person erased has `target_turns` turns,
twice as many messages), starts the daemon on it, offers `--rate` inbound messages a
second (bench.ingest's frames, over two adapter connections) and, a second in, erases
the person with `entity.erase`. Prints how long the erasure took and the ack latency
p50/p99/max of the other people's messages sent while it ran, and of those sent
before it. Once the erasure is done, acks still owed are waited for at most
`--drain` seconds; a message not acked by then counts as late (its latency is the
time it waited), so the figures never leave out the slowest.

`BROKER_SQLITE_DRIVER=stdlib` (or `sqlcipher3`) forces the daemon's SQLite driver:
the standard library's 3.40 has no FTS5 secure-delete, so its erasure merges the
whole full-text index instead.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import anyio

from bench.forgetting import build
from bench.ingest import frame
from tests.harness import DaemonProcess
from wire.client import BrokerClient


def quantiles(values: list[float]) -> str:
    if not values:
        return "none"
    ranked = sorted(values)

    def at(q: float) -> float:
        return ranked[min(len(ranked) - 1, int(q * len(ranked)))] * 1000

    top = ranked[-1] * 1000
    return f"n={len(ranked)} p50 {at(0.5):.1f} ms, p99 {at(0.99):.1f} ms, max {top:.1f} ms"


async def load_and_erase(sock: Path, target: str, rate: int, drain_s: float) -> None:
    sent: list[tuple[float, float]] = []  # (sent at, latency)
    window: list[float] = [0.0, 0.0]
    stop = anyio.Event()
    late = [0]

    async def one(conn_no: int) -> None:
        per_conn = rate / 2
        async with await BrokerClient.connect(sock, role="adapter", channel="load") as c:
            sent_at: dict[str, float] = {}
            done, drained = anyio.Event(), anyio.Event()

            async def reader() -> None:
                while not (done.is_set() and not sent_at):
                    f = await c.recv()
                    if f.get("type") == "ack":
                        at = sent_at.pop(f["req"])
                        sent.append((at, time.perf_counter() - at))
                drained.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                start, i = time.perf_counter(), 0
                while not stop.is_set():
                    delay = start + i / per_conn - time.perf_counter()
                    if delay > 0:
                        await anyio.sleep(delay)
                    sent_at[str(i)] = time.perf_counter()
                    await c.send_raw(frame(conn_no, i))
                    i += 1
                done.set()
                if sent_at:
                    with anyio.move_on_after(drain_s):
                        await drained.wait()
                tg.cancel_scope.cancel()
            now = time.perf_counter()
            late[0] += len(sent_at)
            sent.extend((at, now - at) for at in sent_at.values())

    async def erase() -> None:
        await anyio.sleep(1.0)
        async with await BrokerClient.connect(sock) as o:
            window[0] = time.perf_counter()
            counts = await o.op("entity.erase", entity=target, confirm=target)
            window[1] = time.perf_counter()
        print(f"erasure: {counts} in {window[1] - window[0]:.1f} s")
        await anyio.sleep(0.5)
        stop.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, 0)
        tg.start_soon(one, 1)
        tg.start_soon(erase)
    during = [lat for at, lat in sent if window[0] <= at <= window[1]]
    before = [lat for at, lat in sent if at < window[0]]
    print(f"acks before the erasure: {quantiles(before)}")
    print(f"acks during the erasure: {quantiles(during)}")
    print(f"not acked within {drain_s:.0f} s of the end: {late[0]}")


def built(path: Path, args: argparse.Namespace) -> str:
    """The ledger at `path` and the entity to erase: built, or copied from `--keep`
    (beside it, `.target` names the entity)."""
    keep: Path | None = args.keep
    if keep is None:
        return build(path, args.people, args.turns, args.target_turns)
    named = keep.with_name(keep.name + ".target")
    if not keep.exists():
        named.write_text(build(keep, args.people, args.turns, args.target_turns))
    shutil.copyfile(keep, path)
    return named.read_text()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--people", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--target-turns", type=int, default=5000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--drain", type=float, default=10.0, help="seconds to wait for late acks")
    parser.add_argument(
        "--keep",
        type=Path,
        help="a file to build the ledger into once and copy from on later runs",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="brk-", dir="/tmp"))
    try:
        target = built(work / "ledger.db", args)
        print(f"built {(work / 'ledger.db').stat().st_size / 1e6:.0f} MB")
        d = DaemonProcess(work, {"log_level": "warning"}).start(timeout=120)
        try:
            anyio.run(load_and_erase, d.socket, target, args.rate, args.drain)
        finally:
            d.kill()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
