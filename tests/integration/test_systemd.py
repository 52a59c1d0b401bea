"""The systemd units and the daemon under systemd's protocols, without systemd as PID 1.

- `systemd-analyze verify` and `security --offline` on the shipped units;
- `systemd-socket-activate` handing a socket to `broker.systemd.activated_listener`;
- the real brokerd: served on an activated socket, READY/WATCHDOG/STOPPING sent
  to a $NOTIFY_SOCKET the test binds, and a turn under MemoryDenyWriteExecute.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import anyio
import pytest

import broker.config
import broker.daemon
import broker.server
from broker import systemd
from broker.config import Settings
from tests.harness import DaemonProcess
from wire.client import BrokerClient

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "systemd"
BROKERD = Path(sys.executable).parent / "brokerd"
WAIT = 15.0  # the bound on each wait for a child process

needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
needs_activate = pytest.mark.skipif(
    shutil.which("systemd-socket-activate") is None,
    reason="systemd-socket-activate is not installed",
)


@pytest.fixture
def tmp() -> Iterator[Path]:
    # Unix socket paths must stay under 108 bytes; pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="brk-sd-", dir="/tmp") as name:
        yield Path(name)


# -- the unit files ---------------------------------------------------------------


def _directives(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def _testable_copy(dest: Path) -> Path:
    """The units with ExecStart= pointing at this checkout's brokerd (the shipped
    path, /opt/agent-broker/..., is an example that does not exist here)."""
    service = (UNITS / "brokerd.service").read_text()
    assert "/opt/agent-broker/.venv/bin/brokerd " in service
    (dest / "brokerd.service").write_text(
        service.replace("/opt/agent-broker/.venv/bin/brokerd ", f"{BROKERD} ")
    )
    shutil.copy(UNITS / "brokerd.socket", dest / "brokerd.socket")
    return dest


def _verify(where: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *("systemd-analyze", "verify", "--man=no", "--generators=no"),
            *(str(where / "brokerd.service"), str(where / "brokerd.socket")),
        ],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )


@needs_analyze
def test_units_verify_cleanly(tmp: Path) -> None:
    # Nothing is whitelisted: systemd 252 reports neither the missing
    # agent-broker user nor the non-booted PID 1 here, and any unknown key,
    # bad value or missing executable is printed on stderr.
    result = _verify(_testable_copy(tmp))
    assert result.returncode == 0 and result.stderr == "", result.stderr


@needs_analyze
def test_verify_would_catch_a_mistake(tmp: Path) -> None:
    """The check above means something: a typo in a directive is reported."""
    copy = _testable_copy(tmp)
    unit = copy / "brokerd.service"
    unit.write_text(unit.read_text().replace("WatchdogSec=", "WatchDogSec="))
    result = _verify(copy)
    assert "Unknown key 'WatchDogSec'" in result.stderr


@needs_analyze
def test_service_sandbox_rates_ok(tmp: Path) -> None:
    copy = _testable_copy(tmp)
    result = subprocess.run(
        [
            *("systemd-analyze", "security", "--offline=yes", "--threshold=20", "--no-pager"),
            str(copy / "brokerd.service"),
        ],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    level = re.search(r"Overall exposure level for brokerd.service: ([0-9.]+)", result.stdout)
    assert level is not None, result.stdout + result.stderr
    assert result.returncode == 0 and float(level.group(1)) <= 2.0, result.stdout[-2000:]


def test_units_agree_with_each_other_and_the_daemon() -> None:
    service = _directives(UNITS / "brokerd.service")
    sock = _directives(UNITS / "brokerd.socket")
    env = dict(value.split("=", 1) for value in service["Environment"])
    assert sock["ListenStream"] == [env["BROKER_SOCKET_PATH"]]
    assert sock["Service"] == ["brokerd.service"]
    runtime_dir = "/run/" + service["RuntimeDirectory"][0]
    assert Path(env["BROKER_SOCKET_PATH"]).parent == Path(runtime_dir)
    assert service["RuntimeDirectoryPreserve"] == ["yes"]  # the socket unit's socket lives there
    assert Path(env["BROKER_LEDGER__PATH"]).parent == Path(
        "/var/lib/" + service["StateDirectory"][0]
    )
    assert service["Type"] == ["notify"] and service["NotifyAccess"] == ["main"]
    # The start-up failures a restart cannot fix (broker/daemon.py, broker/config.py).
    assert {int(code) for code in service["RestartPreventExitStatus"][0].split()} == {
        broker.daemon.EX_DATAERR,
        broker.daemon.EX_CANTCREAT,
        broker.daemon.EX_NOPERM,
        broker.config.EX_CONFIG,
    }
    # Stopping takes up to shutdown_grace_s for turns, the reply flush, then up
    # to 5 s to close the engine (broker/daemon.py); TimeoutStopSec must cover it.
    grace = Settings.model_fields["shutdown_grace_s"].default
    flush = getattr(broker.daemon, "FLUSH_AT_STOP_S", 2.0)
    assert float(service["TimeoutStopSec"][0]) > grace + flush + 5
    # The socket unit is optional: the service must start without it.
    assert "Requires" not in service and "BindsTo" not in service


# -- systemd-socket-activate and activated_listener -------------------------------

ECHO = r"""
import json, os, sys
import anyio
from broker import systemd

async def main() -> None:
    listener = await systemd.activated_listener()
    assert listener is not None, "not activated"
    left = sorted(k for k in os.environ if k.startswith("LISTEN_"))
    async with listener:
        stream = await listener.accept()
        async with stream:
            data = await stream.receive()
            reply = {"echo": data.decode(), "env": left, "fd": listener.extra(
                anyio.abc.SocketAttribute.raw_socket).fileno()}
            await stream.send(json.dumps(reply).encode())

anyio.run(main, backend=sys.argv[1])
"""


def _connect(path: Path) -> socket.socket:
    deadline = time.monotonic() + WAIT
    while True:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(WAIT)
        try:
            client.connect(str(path))
            return client
        except (FileNotFoundError, ConnectionRefusedError):
            client.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _wait_for_listening(path: Path) -> None:
    """Until `path` is a listening socket. Its file appears at bind(), before listen(),
    and a connect in between is refused (seen on CI); /proc/net/unix shows the listen
    flag (__SO_ACCEPTCON) without making a connection that would start brokerd."""
    deadline = time.monotonic() + WAIT
    while not _listening(path):
        assert time.monotonic() < deadline, f"nothing listened on {path}"
        time.sleep(0.02)


def _listening(path: Path) -> bool:
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7] == str(path) and int(fields[3], 16) & 0x10000:
            return True
    return False


def _activate(path: Path, *argv: str) -> list[str]:
    """systemd-socket-activate passes on only TERM, PATH, USER, HOME and -E values."""
    return ["systemd-socket-activate", "-l", str(path), f"-EPYTHONPATH={ROOT}", *argv]


@needs_activate
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_activated_listener_accepts_on_the_socket_systemd_passed(tmp: Path, backend: str) -> None:
    path = tmp / "act.sock"
    with subprocess.Popen(
        _activate(path, sys.executable, "-c", ECHO, backend),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        try:
            # systemd-socket-activate listens at once and starts the child on
            # the first connection, which then waits in the backlog.
            with _connect(path) as client:
                client.sendall(b"ping")
                reply = json.loads(client.recv(4096))
            assert proc.wait(WAIT) == 0
        finally:
            proc.kill()
            _, err = proc.communicate(timeout=WAIT)
    assert reply == {"echo": "ping", "env": [], "fd": 3}, err


# -- the real daemon --------------------------------------------------------------


def _uses_systemd(*modules: ModuleType) -> bool:
    """Whether the daemon has been wired to broker.systemd yet."""
    return any(
        value is systemd or getattr(value, "__module__", None) == systemd.__name__
        for module in modules
        for value in vars(module).values()
    )


wired = pytest.mark.skipif(
    not _uses_systemd(broker.daemon, broker.server),
    reason="brokerd is not wired to broker.systemd yet (broker/daemon.py, broker/server.py)",
)


def _spawn(d: DaemonProcess, argv: list[str], env: dict[str, str] | None = None) -> DaemonProcess:
    # Nothing inherited from a test runner that itself runs under systemd.
    inherited = ("BROKER_", "NOTIFY_SOCKET", "WATCHDOG_", "LISTEN_")
    base = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
    log = d.log_path.open("ab")
    d.proc = subprocess.Popen(
        argv, stdout=log, stderr=log, env={**base, **(env or {})}, cwd=d.workdir
    )
    log.close()
    return d


def _brokerd_argv(d: DaemonProcess, backend: str) -> list[str]:
    return [sys.executable, "-m", "broker", "--config", str(d.config_path), "--backend", backend]


def _wait_accepting(d: DaemonProcess) -> None:
    assert d.proc is not None
    deadline = time.monotonic() + WAIT
    while not d._accepting():
        if d.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {d.proc.returncode}:\n{d.log()}")
        assert time.monotonic() < deadline, f"daemon did not become ready:\n{d.log()}"
        time.sleep(0.02)


async def _one_turn(path: Path) -> dict[str, object]:
    with anyio.fail_after(WAIT):
        async with await BrokerClient.connect(path, role="adapter", channel="sms") as c:
            await c.send(
                {
                    "type": "inbound",
                    "req": "r1",
                    "msg_id": "m1",
                    "sender_id": "+1",
                    "peer_kind": "dm",
                    "text": "hello",
                }
            )
            frame = await c.recv()
            while frame["type"] != "deliver":
                frame = await c.recv()
            return frame


@pytest.fixture
def daemons(tmp: Path) -> Iterator[list[DaemonProcess]]:
    # Depends on `tmp` so the daemons are killed before their directory goes.
    started: list[DaemonProcess] = []
    yield started
    for d in started:
        d.kill()


@needs_activate
@wired
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_brokerd_serves_on_the_activated_socket(
    tmp: Path, daemons: list[DaemonProcess], backend: str
) -> None:
    configured = tmp / "configured.sock"
    d = DaemonProcess(tmp, {"socket_path": str(configured)}, backend=backend)
    daemons.append(_spawn(d, _activate(d.socket, *_brokerd_argv(d, backend))))
    _wait_for_listening(d.socket)  # systemd-socket-activate starts brokerd on the first connection

    async def talk() -> tuple[dict[str, object], object]:
        deliver = await _one_turn(d.socket)
        with anyio.fail_after(WAIT):
            async with await BrokerClient.connect(d.socket) as op:
                return deliver, await op.op("health")

    deliver, health = anyio.run(talk)
    assert deliver["text"] == "hello" and isinstance(health, dict) and health["ok"] is True
    assert not configured.exists(), "brokerd bound its own socket instead of the activated one"
    assert "activated" in d.log().lower(), d.log()
    assert d.terminate(WAIT) == 0
    assert d.socket.exists()  # systemd's socket: the daemon must not unlink it


@wired
def test_brokerd_notifies_ready_watchdog_reloading_and_stopping(
    tmp: Path, daemons: list[DaemonProcess]
) -> None:
    d = DaemonProcess(tmp)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(tmp / "notify.sock"))
        notify.settimeout(WAIT)
        env = {"NOTIFY_SOCKET": str(tmp / "notify.sock"), "WATCHDOG_USEC": "1000000"}
        daemons.append(_spawn(d, _brokerd_argv(d, "asyncio"), env))

        def next_with(key: bytes) -> bytes:
            while True:
                datagram = notify.recv(4096)
                if key in datagram.split(b"\n"):
                    return datagram

        next_with(b"READY=1")
        assert d._accepting(), "READY=1 before the socket accepts connections"
        started = time.monotonic()
        next_with(b"WATCHDOG=1")
        next_with(b"WATCHDOG=1")
        assert time.monotonic() - started < 1.5  # pings every 0.5 s
        assert d.proc is not None
        d.proc.send_signal(signal.SIGHUP)  # systemctl reload: ExecReload=kill -HUP
        reloading = next_with(b"RELOADING=1").decode().split("\n")
        assert any(line.startswith("MONOTONIC_USEC=") for line in reloading), reloading
        next_with(b"READY=1")
        d.proc.send_signal(signal.SIGTERM)
        next_with(b"STOPPING=1")
        assert d.proc.wait(WAIT) == 0


# PR_SET_MDWE = 65, PR_MDWE_REFUSE_EXEC_GAIN = 1, PR_GET_MDWE = 66. The daemon then
# runs in this same process (runpy), so the restriction is certainly in force.
MDWE_LAUNCH = """
import ctypes, runpy, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0 or libc.prctl(66, 0, 0, 0, 0) != 1:
    sys.exit(f"prctl(PR_SET_MDWE) failed: errno {ctypes.get_errno()}")
sys.argv = ["brokerd", *sys.argv[1:]]
runpy.run_module("broker", run_name="__main__", alter_sys=True)
"""


def _kernel_has_mdwe() -> bool:
    probe = subprocess.run(
        [sys.executable, "-c", "import ctypes,sys; sys.exit(ctypes.CDLL(None).prctl(65,1,0,0,0))"],
        timeout=WAIT,
        check=False,
    )
    return probe.returncode == 0


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_void_p) != 8,
    reason="PR_SET_MDWE is a 64-bit Linux prctl",
)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_brokerd_runs_a_turn_under_memory_deny_write_execute(
    tmp: Path, daemons: list[DaemonProcess], backend: str
) -> None:
    """MemoryDenyWriteExecute=yes in the unit: no W+X mappings in the daemon.

    The kernel's PR_SET_MDWE (Linux >= 6.3) refuses the same kind of mappings
    as systemd's seccomp filter for it, so the daemon with its
    native extensions (uvloop or trio, orjson, pydantic-core, sqlite3) starting
    and answering a turn shows the directive is safe for it.
    """
    if not _kernel_has_mdwe():
        pytest.skip("this kernel has no PR_SET_MDWE (Linux >= 6.3)")
    d = DaemonProcess(tmp, backend=backend)
    daemons.append(_spawn(d, [sys.executable, "-c", MDWE_LAUNCH, *_brokerd_argv(d, backend)[3:]]))
    _wait_accepting(d)
    deliver = anyio.run(_one_turn, d.socket)
    assert deliver["text"] == "hello"
    assert d.terminate(WAIT) == 0, d.log()
