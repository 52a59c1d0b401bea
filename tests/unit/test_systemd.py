"""broker.systemd: sd_notify datagrams, watchdog parsing and pinging, socket activation.

The notification socket is one the test binds itself (a path and an abstract
name). Socket activation that touches fds 3 and up runs in a child process, so
the test process's own descriptors are never replaced.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from trio.testing import MockClock

from broker import systemd

ROOT = Path(__file__).resolve().parents[2]


class NotifyReceiver:
    """The systemd side of $NOTIFY_SOCKET: a datagram socket read without blocking."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def drain(self) -> list[bytes]:
        out = []
        while True:
            try:
                out.append(self.sock.recv(4096))
            except BlockingIOError:
                return out


@pytest.fixture
def notify_socket(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[NotifyReceiver]:
    """$NOTIFY_SOCKET as a path, or as an abstract name with `indirect` "abstract"."""
    form = getattr(request, "param", "path")
    with (
        tempfile.TemporaryDirectory(prefix="brk-sd-", dir="/tmp") as tmp,
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock,
    ):
        if form == "path":
            path = f"{tmp}/notify.sock"
            sock.bind(path)
            monkeypatch.setenv("NOTIFY_SOCKET", path)
        else:
            name = f"brokerd-test-{uuid.uuid4().hex}"
            sock.bind(b"\0" + name.encode())
            monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        sock.setblocking(False)
        yield NotifyReceiver(sock)


# -- notify -----------------------------------------------------------------------


BOTH_FORMS = pytest.mark.parametrize("notify_socket", ["path", "abstract"], indirect=True)


@BOTH_FORMS
def test_each_helper_sends_its_exact_datagram(notify_socket: NotifyReceiver) -> None:
    assert systemd.ready()
    assert systemd.ready("serving on /run/agent-broker/broker.sock")
    assert systemd.status("rehydrating\n3 sessions")
    assert systemd.watchdog()
    assert systemd.stopping()
    assert systemd.stopping("draining 2 turns")
    assert systemd.extend_timeout(1.5)
    assert systemd.notify("ERRNO=5")
    assert notify_socket.drain() == [
        b"READY=1",
        b"READY=1\nSTATUS=serving on /run/agent-broker/broker.sock",
        b"STATUS=rehydrating 3 sessions",
        b"WATCHDOG=1",
        b"STOPPING=1",
        b"STOPPING=1\nSTATUS=draining 2 turns",
        b"EXTEND_TIMEOUT_USEC=1500000",
        b"ERRNO=5",
    ]


@BOTH_FORMS
def test_reloading_carries_the_monotonic_clock(notify_socket: NotifyReceiver) -> None:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert systemd.reloading("reloading config")
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    [datagram] = notify_socket.drain()
    first, second, third = datagram.decode().split("\n")
    assert first == "RELOADING=1"
    key, _, value = second.partition("=")
    assert key == "MONOTONIC_USEC" and before <= int(value) <= after
    assert third == "STATUS=reloading config"


@pytest.mark.parametrize("value", [None, ""])
def test_not_under_systemd_is_false(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    else:
        monkeypatch.setenv("NOTIFY_SOCKET", value)
    assert systemd.notify("READY=1") is False
    assert systemd.ready() is False and systemd.watchdog() is False


@pytest.mark.parametrize(
    "target",
    [
        "/nonexistent/brokerd-notify.sock",
        pytest.param(f"@brokerd-nobody-{uuid.uuid4().hex}", id="abstract-nobody"),
        "vsock:2:1234",  # a form newer systemd knows; not supported here
        "relative/notify.sock",
    ],
)
def test_unusable_socket_is_false_without_raising(
    monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", target)
    assert systemd.notify("READY=1") is False


@BOTH_FORMS
def test_a_full_socket_does_not_block(notify_socket: NotifyReceiver) -> None:
    # Nobody reads: the receive queue fills, and a blocking send would wait forever.
    assert systemd.watchdog() is True
    sent = 1
    while systemd.watchdog():
        sent += 1
        assert sent < 100_000, "the queue never filled"
    assert notify_socket.drain() == [b"WATCHDOG=1"] * sent


# -- watchdog_interval ------------------------------------------------------------


@pytest.mark.parametrize(
    ("usec", "pid", "expected"),
    [
        (None, None, None),
        ("30000000", None, 30.0),
        ("30000000", "self", 30.0),
        ("500000", "self", 0.5),
        ("30000000", "other", None),  # inherited from the main process
        ("30000000", "junk", None),
        ("0", None, None),
        ("-5", None, None),
        ("thirty", None, None),
        ("", None, None),
    ],
)
def test_watchdog_interval(
    monkeypatch: pytest.MonkeyPatch, usec: str | None, pid: str | None, expected: float | None
) -> None:
    for key, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            real = {"self": str(os.getpid()), "other": str(os.getpid() + 1)}.get(value, value)
            monkeypatch.setenv(key, real)
    assert systemd.watchdog_interval() == expected


# -- watchdog_pinger --------------------------------------------------------------


def _autojump() -> Any:
    return pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}), id="trio-autojump")


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [_autojump()])
async def test_pinger_pings_at_half_the_interval_only_while_healthy(
    notify_socket: NotifyReceiver,
) -> None:
    health = [True]
    async with anyio.create_task_group() as tg:
        start = anyio.current_time()
        tg.start_soon(systemd.watchdog_pinger, 10.0, lambda: health[0])
        await anyio.sleep_until(start + 12)  # pings at 0, 5, 10
        assert notify_socket.drain() == [b"WATCHDOG=1"] * 3
        health[0] = False
        await anyio.sleep_until(start + 27)  # 15, 20, 25 withheld
        assert notify_socket.drain() == []
        health[0] = True
        await anyio.sleep_until(start + 31)  # the cadence resumes at 30
        assert notify_socket.drain() == [b"WATCHDOG=1"]
        tg.cancel_scope.cancel()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [_autojump()])
async def test_a_failing_health_check_withholds_pings_and_keeps_the_pinger(
    notify_socket: NotifyReceiver,
) -> None:
    calls = [0]

    def healthy() -> bool:
        calls[0] += 1
        if calls[0] <= 2:
            raise RuntimeError("writer state unreadable")
        return True

    async with anyio.create_task_group() as tg:
        start = anyio.current_time()
        tg.start_soon(systemd.watchdog_pinger, 2.0, healthy)
        await anyio.sleep_until(start + 1.5)  # checks at 0 and 1 raise
        assert notify_socket.drain() == []
        await anyio.sleep_until(start + 2.5)  # check at 2 passes
        assert notify_socket.drain() == [b"WATCHDOG=1"]
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_pinger_in_real_time(notify_socket: NotifyReceiver) -> None:
    """The same on both backends with a short real interval (loose counts)."""
    health = [True]
    async with anyio.create_task_group() as tg:
        tg.start_soon(systemd.watchdog_pinger, 0.1, lambda: health[0])
        await anyio.sleep(0.13)  # pings at 0, 0.05, 0.1
        assert len(notify_socket.drain()) >= 2
        health[0] = False
        await anyio.sleep(0.15)
        assert notify_socket.drain() == []
        health[0] = True
        await anyio.sleep(0.12)
        assert notify_socket.drain()
        tg.cancel_scope.cancel()


@pytest.mark.anyio
@pytest.mark.parametrize("interval", [0.0, -1.0])
async def test_pinger_rejects_a_nonpositive_interval(interval: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        await systemd.watchdog_pinger(interval, lambda: True)


# -- socket activation, in this process (no fd is touched) ------------------------


def _listen_env(monkeypatch: pytest.MonkeyPatch, **env: str | None) -> None:
    for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        value = env.get(key)
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)


def _listen_vars() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("LISTEN_")}


def test_not_activated(monkeypatch: pytest.MonkeyPatch) -> None:
    _listen_env(monkeypatch)
    assert systemd.listen_fds() == []
    assert systemd.listen_fds_socket() is None


def test_fds_meant_for_another_process_are_ignored_and_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _listen_env(
        monkeypatch, LISTEN_PID=str(os.getpid() + 1), LISTEN_FDS="1", LISTEN_FDNAMES="broker"
    )
    assert systemd.listen_fds_socket() is None
    assert _listen_vars() == {}


def test_garbage_listen_fds_is_an_error_and_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    _listen_env(monkeypatch, LISTEN_PID=str(os.getpid()), LISTEN_FDS="many")
    with pytest.raises(systemd.ActivationError, match="LISTEN_FDS"):
        systemd.listen_fds_socket()
    assert _listen_vars() == {}


def test_zero_fds_is_not_activated(monkeypatch: pytest.MonkeyPatch) -> None:
    _listen_env(monkeypatch, LISTEN_PID=str(os.getpid()), LISTEN_FDS="0")
    assert systemd.listen_fds_socket() is None


@pytest.mark.anyio
async def test_activated_listener_is_none_when_not_activated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _listen_env(monkeypatch)
    assert await systemd.activated_listener() is None


# -- socket activation, in a child that owns fds 3.. ------------------------------

CHILD = r"""
import fcntl, json, os, socket, sys
sys.path.insert(0, sys.argv[1])
spec = json.loads(sys.argv[2])
tmp = spec["tmp"]

def make(kind, i):
    if kind == "pipe":
        r, w = os.pipe()
        os.close(w)
        return r, None
    if kind == "tcp-listen":
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0)); s.listen()
    elif kind == "dgram":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(f"{tmp}/d{i}.sock")
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.bind(f"{tmp}/s{i}.sock")
        if kind == "unix-listen":
            s.listen()
    return s.fileno(), s

# Move every fd out of the way, then into place at 3, 4, ... (as systemd does).
high = []
for i, kind in enumerate(spec["fds"]):
    fd, obj = make(kind, i)
    high.append(fcntl.fcntl(fd, fcntl.F_DUPFD, 100))
    if obj is None:
        os.close(fd)
    else:
        obj.close()
for i, fd in enumerate(high):
    os.dup2(fd, 3 + i)
    os.close(fd)
os.environ["LISTEN_PID"] = str(os.getpid() + (1 if spec.get("other_pid") else 0))
os.environ["LISTEN_FDS"] = str(len(high))
os.environ["LISTEN_FDNAMES"] = ":".join(f"n{i}" for i in range(len(high)))

from broker import systemd
out = {}
try:
    sock = systemd.listen_fds_socket()
except systemd.ActivationError as exc:
    out["error"] = str(exc)
else:
    if sock is not None:
        out["fd"] = sock.fileno()
        out["blocking"] = sock.getblocking()
        out["name"] = sock.getsockname()
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        peer.connect(sock.getsockname())
        conn, _ = sock.accept()
        conn.close(); peer.close()
        out["accepted"] = True
out["env"] = {k: v for k, v in os.environ.items() if k.startswith("LISTEN_")}
out["open"] = []
out["inheritable"] = []
for fd in range(3, 3 + len(high)):
    try:
        os.fstat(fd)
    except OSError:
        continue
    out["open"].append(fd)
    if os.get_inheritable(fd):
        out["inheritable"].append(fd)
print(json.dumps(out))
"""


def _activate_in_child(fds: list[str], *, other_pid: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="brk-sd-", dir="/tmp") as tmp:
        spec = json.dumps({"tmp": tmp, "fds": fds, "other_pid": other_pid})
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(ROOT), spec],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        result["tmp"] = tmp
        return result


def test_the_activated_unix_socket_is_taken_non_blocking_and_env_unset() -> None:
    got = _activate_in_child(["unix-listen"])
    assert got["fd"] == 3 and got["blocking"] is False and got["accepted"] is True
    assert got["name"] == f"{got['tmp']}/s0.sock"
    assert got["env"] == {}
    assert got["open"] == [3] and got["inheritable"] == []  # close-on-exec now


def test_the_first_listening_unix_stream_socket_is_chosen_others_left_open() -> None:
    got = _activate_in_child(["pipe", "dgram", "tcp-listen", "unix-bound", "unix-listen"])
    assert got["fd"] == 7 and got["accepted"] is True
    assert got["open"] == [3, 4, 5, 6, 7] and got["inheritable"] == []
    assert got["env"] == {}


def test_activation_without_a_usable_socket_is_an_error() -> None:
    got = _activate_in_child(["tcp-listen", "dgram"])
    assert "none is a listening Unix stream socket" in got["error"]
    assert got["env"] == {} and got["open"] == [3, 4]


def test_fds_of_another_process_are_left_alone() -> None:
    got = _activate_in_child(["unix-listen"], other_pid=True)
    assert "fd" not in got and "error" not in got
    assert got["env"] == {}
    assert got["inheritable"] == [3]  # not ours: not even marked close-on-exec
