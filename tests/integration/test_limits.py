"""Memory and time bounds against the real daemon: what a misbehaving client can pin.

Each test starts its own daemon: they measure its memory, stall its ledger
writer or wait out its timeouts, which a shared daemon could not survive
unharmed for the next test.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

from tests.harness import DaemonProcess

WAIT = 5.0  # the bound on every wait for the broker
DaemonFactory = Callable[..., DaemonProcess]


def rss_bytes(pid: int) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def hello_line(role: str = "adapter", channel: str = "junk") -> bytes:
    return orjson.dumps({"type": "hello", "v": 1, "role": role, "channel": channel}) + b"\n"


def oversize_connection(path: Path, limit: int, after_hello: bool) -> dict[str, object]:
    """One connection that sends a line one byte over `limit`; the broker's answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(WAIT)
        sock.connect(str(path))
        reader = sock.makefile("rb")
        if after_hello:
            sock.sendall(hello_line())
            welcome = orjson.loads(reader.readline())
            assert welcome["type"] == "welcome", welcome
        # Closed before the newline went out, maybe: the answer is waiting all the same.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(b"x" * (limit + 1) + b"\n")
        answer: dict[str, object] = orjson.loads(reader.readline())
        assert reader.readline() == b"", "the connection must be closed"
        reader.close()
        return answer


def test_oversize_frames_do_not_grow_the_daemon(make_daemon: DaemonFactory) -> None:
    # An adapter that retries one oversize message forever opens connection after
    # connection. Each used to leave its read buffers (about 1.7 MB) in a reference
    # cycle that only a full collection frees, which the tuned collector rarely runs.
    d = make_daemon()
    assert d.proc is not None
    limit = 1 << 20  # the default max_frame_bytes

    def many(count: int) -> None:
        with ThreadPoolExecutor(4) as pool:
            answers = list(
                pool.map(
                    lambda n: oversize_connection(d.socket, limit, after_hello=n % 2 == 0),
                    range(count),
                )
            )
        assert {a["code"] for a in answers} == {"frame_too_large"}, answers[:3]

    many(40)  # the buffers and allocator arenas a connection needs, once
    before = rss_bytes(d.proc.pid)
    many(300)
    grown = rss_bytes(d.proc.pid) - before
    assert grown < 30 << 20, f"RSS grew by {grown / 2**20:.0f} MiB over 300 connections"
