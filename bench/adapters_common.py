"""Shared measuring and set-up for the adapter benchmarks (bench/adapters_*.py).

A conversation is two callables: `send(text)` and `receive()` (the next reply
text). Open loop: one message every 1/rate seconds, replies matched by text.
Closed loop: several conversations, each sending its next message once the
reply to the last one came.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from tests.harness import DaemonProcess
from tests.realservers.processes import AdapterProcess

Send = Callable[[str], Awaitable[None]]
Receive = Callable[[], Awaitable[str]]


@dataclass
class Figures:
    label: str
    rate: float  # messages per second answered
    p50_ms: float
    p99_ms: float
    count: int

    def line(self) -> str:
        return (
            f"{self.label:<44} {self.rate:8.1f} msg/s  p50 {self.p50_ms:7.2f} ms"
            f"  p99 {self.p99_ms:7.2f} ms  (n={self.count})"
        )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def open_loop(label: str, send: Send, receive: Receive, rate: float, n: int) -> Figures:
    """Round trips at a fixed offered rate (each reply echoes its message's text)."""
    sent_at: dict[str, float] = {}
    took: list[float] = []
    began = time.perf_counter()

    async def receiver() -> None:
        while len(took) < n:
            text = await receive()
            start = sent_at.pop(text, None)
            if start is not None:
                took.append(time.perf_counter() - start)

    with anyio.fail_after(n / rate + 30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(receiver)
            for i in range(n):
                await anyio.sleep(max(0.0, began + i / rate - time.perf_counter()))
                text = f"bench {i} {label[:8]}"
                sent_at[text] = time.perf_counter()
                await send(text)
    elapsed = time.perf_counter() - began
    return Figures(label, n / elapsed, percentile(took, 0.5) * 1e3, percentile(took, 0.99) * 1e3, n)


async def closed_loop(
    label: str, conversations: list[tuple[Send, Receive]], seconds: float
) -> Figures:
    """Messages answered per second with every conversation in lockstep."""
    took: list[float] = []
    deadline = time.perf_counter() + seconds

    async def converse(number: int, send: Send, receive: Receive) -> None:
        i = 0
        while time.perf_counter() < deadline:
            text = f"loop {number}-{i}"
            start = time.perf_counter()
            await send(text)
            while await receive() != text:
                pass
            took.append(time.perf_counter() - start)
            i += 1

    began = time.perf_counter()
    with anyio.fail_after(seconds + 30):
        async with anyio.create_task_group() as tg:
            for number, (send, receive) in enumerate(conversations):
                tg.start_soon(converse, number, send, receive)
    elapsed = time.perf_counter() - began
    return Figures(
        label,
        len(took) / elapsed,
        percentile(took, 0.5) * 1e3,
        percentile(took, 0.99) * 1e3,
        len(took),
    )


async def broker_alone(socket: str, rate: float, n: int) -> Figures:
    """The broker's own round trip (SDK → broker → echo engine → reply), no chat server."""
    from adapters.sdk import Adapter, Deliver

    async with Adapter.connect(socket, "bench-sdk", auto_confirm=True) as adapter:
        replies = adapter.replies()
        counter = iter(range(10**9))

        async def send(text: str) -> None:
            await adapter.send(f"sdk-{next(counter)}-{time.time_ns()}", "bench-user", text)

        async def receive() -> str:
            while True:
                reply = await replies.__anext__()
                if isinstance(reply, Deliver):
                    return reply.text

        return await open_loop(f"broker alone (SDK), {rate:g} msg/s", send, receive, rate, n)


def arguments(doc: str | None, clients: int = 4) -> argparse.Namespace:
    """The command line every adapter benchmark takes."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=clients)
    parser.add_argument("--seconds", type=float, default=10.0)
    return parser.parse_args()


def workdir(module: str) -> Path:
    work = Path(tempfile.mkdtemp(prefix=f"bench-{module}-", dir="/tmp"))
    (work / "d").mkdir()
    return work


@contextlib.contextmanager
def broker_and_adapter(
    module: str, work: Path, section: dict[str, Any]
) -> Iterator[tuple[DaemonProcess, AdapterProcess]]:
    """A broker on `work/d` and the adapter `module` with its config `section`,
    stopped and removed at the end; BENCH_ADAPTER_LOG=DEBUG (say) keeps its log."""
    level = os.environ.get("BENCH_ADAPTER_LOG")
    daemon = DaemonProcess(work / "d", None).start()
    config = {
        "broker": {"socket": str(daemon.socket), "channel": module},
        "adapter": {"log_level": level or "WARNING"},
        module: section,
    }
    adapter = AdapterProcess(module, work, config).start()
    try:
        yield daemon, adapter
    finally:
        adapter.stop()
        daemon.kill()
        if level:
            shutil.copy(work / f"{module}.log", f"/tmp/bench-{module}-adapter.log")
        shutil.rmtree(work, ignore_errors=True)
