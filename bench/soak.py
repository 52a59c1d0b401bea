"""Soak benchmark: the daemon's memory under clients that misbehave, against the real daemon.

    .venv/bin/python -m bench.soak [--oversize 10000] [--stalled 8]

Two runs, each on a fresh daemon with the default limits (max_frame_bytes 1 MiB,
max_text_bytes 256 KiB, max_inflight 1,024, max_pending_bytes 64 MiB):

1. Oversize frames: connections one after another (4 at a time), each sending
   one line a byte over max_frame_bytes, as an adapter that retries an oversize
   message does; every other one says hello first. The daemon's VmRSS at the
   start, after each fifth of the connections, and at the end.
   Aim: at most 50 MB over the start.
2. A stalled writer: the ledger writer process is stopped (SIGSTOP) and
   `--stalled` adapter connections each send max_inflight frames with a text of
   max_text_bytes without waiting for answers. VmRSS at the start, once every
   frame is answered or pending, and the peak (VmHWM); then the writer goes on
   (SIGCONT) and every frame taken is acked. Aim: at most max_pending_bytes +
   50 MB over the start while stalled. The peak of the whole run is printed
   too: when the writer goes on, the ledger link pickles every job that waited
   into one batch and copies that once more to put its length in front
   (ledger/writer/process.py), so for a moment the daemon holds the pending
   texts three times.

VmRSS counts what the daemon's process holds; the writer process is apart.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import orjson

from bench.turns import rss_kib
from broker.config import Settings
from tests.harness import DaemonProcess, writer_pid
from wire.client import BrokerClient

DEFAULTS = Settings()
MB = 1_000_000
AIM_MB = 50


def mb(kib: int) -> str:
    return f"{kib * 1024 / MB:.1f} MB"


def oversize(path: Path, limit: int, hello: bool) -> str:
    """One connection sending a line a byte over `limit`; the code of the answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(path))
        reader = sock.makefile("rb")
        if hello:
            sock.sendall(b'{"type":"hello","v":1,"role":"adapter","channel":"retry"}\n')
            reader.readline()
        # Closed before the newline went out, maybe: the answer is waiting all the same.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(b"x" * (limit + 1) + b"\n")
        code = str(orjson.loads(reader.readline()).get("code"))
        reader.close()
        return code


def oversize_run(connections: int) -> None:
    limit = DEFAULTS.max_frame_bytes
    print(f"oversize frames: {connections} connections, each one line of {limit + 1} bytes")
    with tempfile.TemporaryDirectory() as tmp, DaemonProcess(Path(tmp), {}) as daemon:
        assert daemon.proc is not None
        pid = daemon.proc.pid
        start, _ = rss_kib(pid)
        print(f"  VmRSS at start            {mb(start)}")
        step = max(1, connections // 5)
        done = 0
        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            while done < connections:
                count = min(step, connections - done)
                codes = set(
                    pool.map(
                        lambda n: oversize(daemon.socket, limit, hello=n % 2 == 0),
                        range(done, done + count),
                    )
                )
                if codes != {"frame_too_large"}:
                    raise RuntimeError(f"unexpected answers: {codes}")
                done += count
                rss, _ = rss_kib(pid)
                print(f"  VmRSS after {done:>6}       {mb(rss)}")
        end, peak = rss_kib(pid)
        grown = (end - start) * 1024 / MB
        verdict = "ok" if grown <= AIM_MB else "OVER"
        print(
            f"  grown {grown:+.1f} MB (aim: at most +{AIM_MB} MB: {verdict}); peak {mb(peak)};"
            f" {connections / (time.perf_counter() - t0):.0f} connections/s"
        )


def big_frame(conn_no: int, i: int, text: str) -> bytes:
    msg_id = f"c{conn_no}-{i}"
    frame = {"type": "inbound", "req": msg_id, "msg_id": msg_id, "sender_id": f"u{conn_no}"}
    return orjson.dumps({**frame, "peer_kind": "dm", "text": text, "queue_mode": "collect"}) + b"\n"


@dataclass
class Tally:
    connections: int
    taken: int = 0  # frames pending their commit
    answered: int = 0  # connections with every frame answered or pending
    acked: int = 0
    all_answered: anyio.Event = field(default_factory=anyio.Event)
    go_on: anyio.Event = field(default_factory=anyio.Event)  # the writer runs again


async def stalled_connection(path: Path, conn_no: int, frames: int, text: str, t: Tally) -> None:
    """Send `frames` big frames at once; count the refusals, then (once the writer
    runs again) wait for the acks of the rest."""
    async with await BrokerClient.connect(path, role="adapter", channel="stall") as client:
        taken = frames

        async def send() -> None:
            for i in range(frames):
                await client.send_raw(big_frame(conn_no, i, text))
            await client.send({"type": "end", "req": "end"})  # answered after all before it

        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            while (frame := await client.recv()).get("req") != "end":
                if frame.get("code") != "overloaded":
                    raise RuntimeError(f"unexpected answer while stalled: {frame}")
                taken -= 1
        t.taken += taken
        t.answered += 1
        if t.answered == t.connections:
            t.all_answered.set()
        await t.go_on.wait()
        acked = 0
        while acked < taken:
            frame = await client.recv()
            if frame.get("type") != "ack":
                raise RuntimeError(f"unexpected answer after the stall: {frame}")
            acked += 1
        t.acked += acked


async def stalled_run(connections: int, max_pending_bytes: int) -> None:
    frames, text_bytes = DEFAULTS.max_inflight, DEFAULTS.max_text_bytes
    text = "x" * text_bytes
    line = len(big_frame(0, 0, text))
    print(
        f"stalled writer: {connections} connections x {frames} frames of {line} bytes"
        f" ({connections * frames * line / MB:,.0f} MB offered);"
        f" max_pending_bytes {max_pending_bytes / MB:.1f} MB"
    )
    # Turns are held back (collect with a long quiet period), as in bench.ingest:
    # this measures what ingest holds, not what turns over these texts would.
    config = {
        "max_pending_bytes": max_pending_bytes,
        "log_level": "warning",
        "queue": {"debounce_ms": 600_000, "cap": 10_000_000},
    }
    with tempfile.TemporaryDirectory() as tmp, DaemonProcess(Path(tmp), config) as daemon:
        assert daemon.proc is not None
        pid = daemon.proc.pid
        writer = await writer_pid(daemon.socket)
        if writer is None:
            raise RuntimeError("the daemon writes in a thread: nothing to stop")
        start, _ = rss_kib(pid)
        print(f"  VmRSS at start                    {mb(start)}")
        tally = Tally(connections)
        t0 = time.perf_counter()
        os.kill(writer, signal.SIGSTOP)
        try:
            async with anyio.create_task_group() as tg:
                for n in range(connections):
                    tg.start_soon(stalled_connection, daemon.socket, n, frames, text, tally)
                with anyio.fail_after(600):
                    await tally.all_answered.wait()
                stalled, stalled_peak = rss_kib(pid)
                print(
                    f"  VmRSS, every frame answered       {mb(stalled)} (peak {mb(stalled_peak)});"
                    f" {tally.taken} frames pending their commit,"
                    f" {connections * frames - tally.taken} answered overloaded,"
                    f" in {time.perf_counter() - t0:.1f} s"
                )
                os.kill(writer, signal.SIGCONT)
                tally.go_on.set()
        finally:
            os.kill(writer, signal.SIGCONT)
        end, peak = rss_kib(pid)
        print(
            f"  VmRSS after the writer went on    {mb(end)} (peak {mb(peak)}), {tally.acked} acks"
        )
        grown = (stalled_peak - start) * 1024 / MB
        aim = max_pending_bytes / MB + AIM_MB
        verdict = "ok" if grown <= aim else "OVER"
        print(
            f"  peak while stalled: {grown:+.1f} MB over the start"
            f" (aim: at most +{aim:.0f} MB: {verdict})"
        )
        print(f"  peak of the run:    {(peak - start) * 1024 / MB:+.1f} MB over the start")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--oversize", type=int, default=10_000, help="oversize connections")
    parser.add_argument("--stalled", type=int, default=8, help="connections while stalled")
    parser.add_argument(
        "--max-pending-bytes", type=int, default=DEFAULTS.max_pending_bytes, help="for run 2"
    )
    args = parser.parse_args()
    if args.oversize:
        oversize_run(args.oversize)
    if args.stalled:
        anyio.run(stalled_run, args.stalled, args.max_pending_bytes)


if __name__ == "__main__":
    main()
