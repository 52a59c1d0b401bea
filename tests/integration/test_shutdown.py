"""SIGTERM: stop accepting, let running turns finish up to the deadline, abort the rest."""

from __future__ import annotations

import signal
import time

import anyio
import orjson
import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from wire.client import BrokerClient

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


def inbound(msg_id: str, text: str) -> dict[str, object]:
    return {
        "type": "inbound",
        "req": msg_id,
        "msg_id": msg_id,
        "sender_id": "+1",
        "peer_kind": "dm",
        "text": text,
        "queue_mode": "followup",
    }


async def start_turn(d: DaemonProcess, text: str) -> BrokerClient:
    """Send one message and return once its turn streams."""
    client = await BrokerClient.connect(d.socket, role="adapter", channel="sms")
    await client.send(inbound("m1", text))
    with anyio.fail_after(10):
        while (await client.recv())["type"] != "delta":
            pass
    return client


def wait_exit(d: DaemonProcess, timeout: float) -> tuple[int, float]:
    assert d.proc is not None
    started = time.monotonic()
    code = d.proc.wait(timeout)
    return code, time.monotonic() - started


async def test_running_turn_finishes_within_the_grace_period(make_daemon: DaemonFactory) -> None:
    d = make_daemon({"engine": {"chunks": 3, "delay_ms": 300}, "shutdown_grace_s": 10})
    client = await start_turn(d, "one two three")
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    frames = []
    with anyio.fail_after(10):
        try:
            while True:
                frames.append(await client.recv())
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass
    await client.aclose()
    code, _ = wait_exit(d, 10)
    assert code == 0
    delivers = [f for f in frames if f["type"] == "deliver"]
    assert [(f["status"], f["text"]) for f in delivers] == [("final", "one two three")]
    with d.db() as db:
        assert db.execute("SELECT status FROM turns").fetchall() == [("completed",)]
        assert db.execute("SELECT status FROM queue_items").fetchall() == [("done",)]


async def test_turn_past_the_deadline_is_aborted_and_runs_after_restart(
    make_daemon: DaemonFactory,
) -> None:
    d = make_daemon({"engine": {"chunks": 20, "delay_ms": 500}, "shutdown_grace_s": 0.5})
    client = await start_turn(d, "a b c d e f g h i j k l m n o p q r s t")
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    code, took = wait_exit(d, 15)
    await client.aclose()
    assert code == 0
    assert took < 8, "the deadline bounds the shutdown"
    with d.db() as db:
        assert db.execute("SELECT status, reason FROM turns").fetchall() == [
            ("aborted", "shutdown")
        ]
        assert db.execute("SELECT status FROM queue_items").fetchall() == [("queued",)]
    d.config["engine"] = {"chunks": 1, "delay_ms": 0}
    from tests.harness import write_config

    write_config(d.config_path, d.config)
    d.start()
    with anyio.fail_after(10):
        while True:
            with d.db() as db:
                rows = db.execute("SELECT status FROM turns ORDER BY started_at").fetchall()
            if ("completed",) in rows:
                break
            await anyio.sleep(0.05)
    assert rows == [("aborted",), ("completed",)]
    d.terminate()


async def test_second_signal_forces_exit(make_daemon: DaemonFactory) -> None:
    d = make_daemon({"engine": {"chunks": 20, "delay_ms": 500}, "shutdown_grace_s": 30})
    client = await start_turn(d, "a b c d e f g h i j k l m n o p q r s t")
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    await anyio.sleep(0.3)
    d.proc.send_signal(signal.SIGTERM)
    code, took = wait_exit(d, 10)
    await client.aclose()
    assert took < 5
    assert code in (0, 1, -signal.SIGTERM)
    d.start()  # the cut-off turn is recovered as a crash and runs again
    with anyio.fail_after(10):
        while True:
            with d.db() as db:
                reasons = [r[0] for r in db.execute("SELECT reason FROM turns")]
            if reasons:
                break
            await anyio.sleep(0.05)
    assert reasons[0] in ("crash", "shutdown")


async def test_idle_sessions_hold_no_actor(make_daemon: DaemonFactory) -> None:
    d = make_daemon({"queue": {"idle_stop_s": 0.3}})
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        for n in range(5):
            await c.send(
                {
                    "type": "inbound",
                    "req": str(n),
                    "msg_id": f"i{n}",
                    "sender_id": f"+{n}",
                    "peer_kind": "dm",
                    "text": "hi",
                }
            )
        delivered = 0
        with anyio.fail_after(10):
            while delivered < 5:
                delivered += (await c.recv())["type"] == "deliver"
        async with await BrokerClient.connect(d.socket) as op:
            busy = (await op.op("health"))["actors"]
            with anyio.fail_after(10):
                while (health := await op.op("health"))["actors"]:  # noqa: ASYNC110 - polls the daemon over the wire
                    await anyio.sleep(0.05)
    assert 1 <= busy <= 5
    assert health["actors"] == 0 and health["sessions"] == 5


LOAD = 300  # messages per run, all sent at once: most are in flight at the signal
LOAD_RUNS = 10


async def push_and_confirm(d: DaemonProcess, acked: set[str], run: int) -> None:
    """Send LOAD messages from many senders, confirm every reply, until the daemon goes."""
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as client:
        frames = b"".join(
            orjson.dumps(
                {
                    "type": "inbound",
                    "req": f"r{run}-{n}",
                    "msg_id": f"r{run}-{n}",
                    "sender_id": f"+{n % 60}",
                    "peer_kind": "dm",
                    "text": f"message {n}",
                    "queue_mode": "followup",
                }
            )
            + b"\n"
            for n in range(LOAD)
        )
        await client.send_raw(frames)
        try:
            while True:
                frame = await client.recv()
                if frame["type"] == "ack":
                    acked.add(frame["msg_id"])
                elif frame["type"] == "deliver":
                    await client.send({"type": "delivered", "out_id": frame["out_id"]})
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return  # the daemon closed the connection: it is stopping


@pytest.mark.slow
async def test_sigterm_under_load_exits_0_and_keeps_every_acked_message(
    make_daemon: DaemonFactory,
) -> None:
    grace = 1.0
    for run in range(LOAD_RUNS):
        d = make_daemon({"shutdown_grace_s": grace}, name=f"load{run}")
        assert d.proc is not None
        acked: set[str] = set()
        with anyio.fail_after(grace + 20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(push_and_confirm, d, acked, run)
                with anyio.fail_after(10):
                    while len(acked) < LOAD // 3:  # noqa: ASYNC110 - waits on the pusher's acks
                        await anyio.sleep(0.005)
                d.proc.send_signal(signal.SIGTERM)
                code, took = await anyio.to_thread.run_sync(wait_exit, d, grace + 10)
        assert code == 0, f"run {run}: exit {code}\n{d.log()[-3000:]}"
        assert took < grace + 1, f"run {run}: took {took:.2f}s"
        assert "Traceback" not in d.log(), f"run {run}:\n{d.log()[-3000:]}"
        with d.db() as db:
            stored = {r[0] for r in db.execute("SELECT msg_id FROM inbound")}
        assert acked <= stored, f"run {run}: acked but lost: {sorted(acked - stored)[:5]}"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_an_idle_daemon_removes_its_socket_when_it_stops(
    make_daemon: DaemonFactory, backend: str
) -> None:
    # Nothing to drain: the stop runs to its cancel without yielding to the accept
    # loop, which must still take its socket file away.
    d = make_daemon(backend=backend)
    assert d.socket.exists()
    code = await anyio.to_thread.run_sync(d.terminate)
    assert code == 0
    assert not d.socket.exists()
