"""Memory and time bounds against the real daemon: what a misbehaving client can pin.

Each test starts its own daemon: they measure its memory, stall its ledger
writer or wait out its timeouts, which a shared daemon could not survive
unharmed for the next test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from tests.harness import DaemonProcess, writer_pid

WAIT = 5.0  # the bound on every wait for the broker
DaemonFactory = Callable[..., DaemonProcess]
# The daemon runs under each event loop; the client side is plain blocking sockets.
each_backend = pytest.mark.parametrize("backend", ["asyncio", "trio"])


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


@each_backend
def test_oversize_frames_do_not_grow_the_daemon(make_daemon: DaemonFactory, backend: str) -> None:
    # An adapter that retries one oversize message forever opens connection after
    # connection. Each used to leave its read buffers (over a megabyte) in a reference
    # cycle that only a full collection frees, which the tuned collector rarely runs.
    d = make_daemon(backend=backend)
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


# -- frame_timeout_s --------------------------------------------------------------

PUSHED = frozenset({"delta", "deliver", "log"})  # frames the broker sends on its own
# The echo engine streams its first chunk, then waits a minute: no turn ends
# during a test.
SLOW_ENGINE = {"delay_ms": 60_000, "chunks": 1}


class LineClient:
    """A blocking client: what an adapter written without the SDK does."""

    def __init__(self, d: DaemonProcess, channel: str | None = "slowpoke") -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(WAIT)
        self.sock.connect(str(d.socket))
        self.file = self.sock.makefile("rb")
        if channel is not None:
            self.sock.sendall(hello_line("adapter", channel))
            assert self.answer()["type"] == "welcome"

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    def answer(self) -> dict[str, Any]:
        """The next frame that answers something (pushed replies are skipped)."""
        while True:
            data = self.file.readline()
            assert data, "the broker closed the connection"
            frame: dict[str, Any] = orjson.loads(data)
            if frame.get("type") not in PUSHED:
                return frame

    def closed(self) -> bool:
        try:
            while data := self.file.readline():
                assert orjson.loads(data).get("type") in PUSHED, data
        except TimeoutError:
            return False
        return True


def inbound_line(msg_id: str, text: str = "hello") -> bytes:
    frame = {
        "type": "inbound",
        "req": msg_id,
        "msg_id": msg_id,
        "sender_id": "+15550100",
        "peer_kind": "dm",
        "text": text,
    }
    return orjson.dumps(frame) + b"\n"


@each_backend
def test_an_unfinished_frame_times_out_and_an_idle_connection_stays(
    make_daemon: DaemonFactory,
    backend: str,
) -> None:
    timeout = 0.5
    d = make_daemon({"frame_timeout_s": timeout, "engine": SLOW_ENGINE}, backend=backend)
    idle, slow, stuck = LineClient(d), LineClient(d), LineClient(d)
    try:
        # A frame that arrives in pieces is fine as long as it ends in time.
        whole = inbound_line("slow-1")
        slow.sock.sendall(whole[:20])
        time.sleep(timeout * 0.6)
        slow.sock.sendall(whole[20:])
        assert slow.answer()["type"] == "ack"

        # A whole frame, then half of one that never ends: the clock starts at the half.
        started = time.monotonic()
        stuck.sock.sendall(inbound_line("stuck-1") + inbound_line("stuck-2")[:30])
        assert stuck.answer()["type"] == "ack"
        error = stuck.answer()
        elapsed = time.monotonic() - started
        assert (error["type"], error["code"]) == ("error", "invalid"), error
        assert "frame_timeout_s" in error["message"] and "req" not in error, error
        assert timeout - 0.1 <= elapsed < timeout + WAIT, elapsed
        assert stuck.closed()

        # Idle for more than twice the timeout, with nothing half sent: still served.
        time.sleep(max(0.0, started + 2 * timeout - time.monotonic()))
        idle.sock.sendall(inbound_line("idle-1"))
        assert idle.answer()["type"] == "ack"
        slow.sock.sendall(inbound_line("slow-2"))
        assert slow.answer()["type"] == "ack"
    finally:
        for client in (idle, slow, stuck):
            client.close()
    refusals = [line for line in d.log_lines() if "unfinished" in line]
    assert len(refusals) == 1 and "slowpoke" in refusals[0], refusals
    with d.db() as db:
        stored = {r[0] for r in db.execute("SELECT msg_id FROM inbound")}
    assert stored == {"slow-1", "stuck-1", "idle-1", "slow-2"}


# -- max_pending_bytes ------------------------------------------------------------


@each_backend
def test_pending_bytes_past_the_limit_are_overloaded_until_commits_free_them(
    make_daemon: DaemonFactory,
    backend: str,
) -> None:
    limit = 64 << 10
    d = make_daemon(
        {
            "max_pending_bytes": limit,
            "max_frame_bytes": 16 << 10,
            "max_text_bytes": 16 << 10,
            "engine": SLOW_ENGINE,
        },
        backend=backend,
    )
    writer = anyio.run(writer_pid, d.socket)
    assert writer is not None
    text = "x" * 6000
    lines = {f"a{i}": inbound_line(f"a{i}", text) for i in range(20)}
    size = len(lines["a0"]) - 1  # a frame's bytes, its newline aside
    fits = limit // size
    a, b = LineClient(d, "fill"), LineClient(d, "fill")
    try:
        os.kill(writer, signal.SIGSTOP)  # nothing commits, nothing is acked
        try:
            # The unknown frame at the end is answered after all before it are handled.
            a.sock.sendall(b"".join(lines.values()) + b'{"type":"bogus","req":"end"}\n')
            shed: list[str] = []
            while (answer := a.answer()).get("req") != "end":
                assert (answer["type"], answer["code"]) == ("error", "overloaded"), answer
                assert "pending" in answer["message"], answer
                shed.append(answer["req"])
            waiting = [m for m in lines if m not in shed]
            assert waiting == [f"a{i}" for i in range(fits)], (fits, shed)
            # The limit is the broker's, not the connection's: b has nothing in flight.
            b.sock.sendall(inbound_line("b0", text))
            answer = b.answer()
            assert (answer["type"], answer["code"], answer["req"]) == ("error", "overloaded", "b0")
        finally:
            os.kill(writer, signal.SIGCONT)
        acked = {a.answer()["msg_id"] for _ in waiting}
        assert acked == set(waiting)
        # Commits freed the room: the refused frames are taken now.
        for client, msg_id, data in [(b, "b0", inbound_line("b0", text))] + [
            (a, m, lines[m]) for m in shed
        ]:
            client.sock.sendall(data)
            answer = client.answer()
            assert (answer["type"], answer["msg_id"]) == ("ack", msg_id), answer
            acked.add(msg_id)
    finally:
        a.close()
        b.close()
    with d.db() as db:
        stored = {r[0] for r in db.execute("SELECT msg_id FROM inbound")}
    assert stored == acked == {*lines, "b0"}
