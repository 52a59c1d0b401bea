"""The ledger writer process dies or stalls: the daemon says so at once and stops.

A writer killed with SIGKILL leaves nothing that can commit, so the daemon
must end within a second, with one log line saying why and a non-zero status,
whether it was idle or busy; `health` must never call it ok meanwhile. A
writer stopped with SIGSTOP is alive but stalled: `health` names it and the
daemon keeps going, since SIGCONT resumes it with nothing lost.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import anyio
import orjson
import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess, time_to_end, writer_pid
from wire.client import BrokerClient

pytestmark = pytest.mark.anyio


def inbound(n: int, sender: int) -> dict[str, object]:
    return {
        "type": "inbound",
        "req": f"m{n}",
        "msg_id": f"m{n}",
        "sender_id": f"+{sender}",
        "peer_kind": "dm",
        "text": f"message {n}",
        "queue_mode": "followup",
    }


async def live_actors(d: DaemonProcess, sessions: int) -> None:
    """One reply in each of `sessions` sessions; their actors stay up (idle_stop_s)."""
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        for n in range(sessions):
            await c.send(inbound(n, n))
        delivered = 0
        with anyio.fail_after(10):
            while delivered < sessions:
                delivered += (await c.recv())["type"] == "deliver"


def log_records(d: DaemonProcess) -> list[dict[str, object]]:
    out = []
    for line in d.log_lines():
        if line.startswith("{"):
            out.append(orjson.loads(line))
    return out


def assert_stopped_for_the_writer(d: DaemonProcess, round_no: int) -> None:
    assert d.proc is not None
    log = d.log()
    assert d.proc.returncode not in (0, None), f"round {round_no}: exit {d.proc.returncode}"
    assert "Traceback" not in log, f"round {round_no}:\n{log[-3000:]}"
    records = log_records(d)
    critical = [r for r in records if r.get("level") == "critical"]
    assert [r["event"] for r in critical] == ["ledger writer died; stopping"], (
        f"round {round_no}: {critical}"
    )
    assert "killed by SIGKILL" in str(critical[0]["error"])
    # Turns whose commit the death cut off may say so; they must blame the writer.
    errors = [r for r in records if r.get("level") == "error"]
    assert all("ledger writer" in str(r.get("error")) for r in errors), errors
    assert not [r for r in records if "actor" in str(r.get("event"))], f"round {round_no}"


@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_killed_writer_of_an_idle_daemon_stops_it_within_a_second(
    make_daemon: DaemonFactory, backend: str
) -> None:
    for round_no in range(3):
        d = make_daemon(backend=backend, name=f"{backend}{round_no}")
        await live_actors(d, 5)
        pid = await writer_pid(d.socket)
        assert d.proc is not None and pid is not None
        timed = time_to_end(d.proc.pid, kill_writer(pid), 5.0)
        d.proc.wait(1)
        assert_within_a_second(timed, round_no)
        assert_stopped_for_the_writer(d, round_no)


def kill_writer(pid: int) -> Callable[[], None]:
    return lambda: os.kill(pid, signal.SIGKILL)


def assert_within_a_second(timed: tuple[float, float] | None, round_no: int) -> None:
    """Within a second of the daemon's own progress: the time it (or the test's
    watching thread) waited for a CPU of a loaded machine is not counted."""
    assert timed is not None, f"round {round_no}: still running"
    took, waited = timed
    assert took - waited < 1.0, (
        f"round {round_no}: took {took:.2f} s, {waited:.2f} s of them waiting for a CPU"
    )


async def keep_busy(d: DaemonProcess, sent: list[int]) -> None:
    """Messages to 20 sessions, a few at a time, until the daemon goes."""
    try:
        async with (
            await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c,
            anyio.create_task_group() as tg,
        ):

            async def drain() -> None:
                while True:
                    await c.recv()

            tg.start_soon(drain)
            n = 1000
            while True:
                await c.send(inbound(n, n % 20))
                n += 1
                sent[0] = n
                await anyio.sleep(0.002)
    except* (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
        pass  # the daemon went away: that is the point


@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_killed_writer_of_a_busy_daemon_stops_it_within_a_second(
    make_daemon: DaemonFactory,
) -> None:
    for round_no in range(3):
        d = make_daemon({"engine": {"chunks": 4, "delay_ms": 50}}, name=f"busy{round_no}")
        pid = await writer_pid(d.socket)
        assert d.proc is not None and pid is not None
        sent = [0]
        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(keep_busy, d, sent)
                while sent[0] < 1200:  # noqa: ASYNC110 - waits on the pusher
                    await anyio.sleep(0.01)
                timed = await anyio.to_thread.run_sync(
                    time_to_end, d.proc.pid, kill_writer(pid), 5.0
                )
        d.proc.wait(1)
        assert_within_a_second(timed, round_no)
        assert_stopped_for_the_writer(d, round_no)


async def health(d: DaemonProcess) -> dict[str, object]:
    async with await BrokerClient.connect(d.socket) as op:
        result: dict[str, object] = await op.op("health")
    return result


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_health_names_a_stopped_writer_and_acks_resume_after_sigcont(
    make_daemon: DaemonFactory,
) -> None:
    """A stopped writer is alive but stalled: not ok, and the daemon waits for it."""
    d = make_daemon()
    pid = await writer_pid(d.socket)
    assert pid is not None
    assert (await health(d))["ok"] is True
    os.kill(pid, signal.SIGSTOP)
    try:
        with anyio.fail_after(5):
            while (said := await health(d))["ok"]:  # noqa: ASYNC110 - until the kernel stops it
                await anyio.sleep(0.01)
        assert said["problems"] == [
            "the ledger writer process is stopped (SIGSTOP or a debugger); writes wait"
        ]
        async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
            await c.send(inbound(1, 1))
            with anyio.move_on_after(0.3):
                assert (await c.recv())["type"] != "ack", "acked while the writer was stopped"
            os.kill(pid, signal.SIGCONT)
            with anyio.fail_after(5):
                assert (await c.recv())["type"] == "ack"
    finally:
        os.kill(pid, signal.SIGCONT)
    after = await health(d)
    assert after["ok"] is True and after["problems"] == []


PY_3_11_2 = Path("/usr/bin/python3.11")


def start_on_debian_python(config: Path) -> subprocess.Popen[str]:
    """brokerd under Debian's own Python 3.11.2, with the venv's (cp311) packages."""
    if not PY_3_11_2.exists():
        pytest.skip(f"{PY_3_11_2} is not installed")
    import site

    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, site.getsitepackages()[0]])}
    return subprocess.Popen(
        [str(PY_3_11_2), "-m", "broker", "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_the_writer_lost_message_on_debian_python_3_11_2(short_tmp: Path) -> None:
    """3.11.0-3.11.3 wrap an exception raised inside `except*`: the message must not."""
    d = DaemonProcess(short_tmp)
    proc = start_on_debian_python(d.config_path)
    try:
        with anyio.fail_after(20):
            # Until it accepts: the socket's file appears at bind, before it listens.
            while not d._accepting():  # noqa: ASYNC110 - waits on another process
                await anyio.sleep(0.05)
            pid = await writer_pid(d.socket)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        _, err = await anyio.to_thread.run_sync(proc.communicate, None, 5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:  # else collected open later, failing another test
            proc.stderr.close()
    assert proc.returncode == 1, err
    assert "Traceback" not in err, err
    assert "brokerd: stopped: the ledger writer process was killed by SIGKILL" in err
