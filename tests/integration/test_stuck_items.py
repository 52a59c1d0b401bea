"""Acked items that no live actor holds: `health` names them, `doctor` fails on them.

Two real ways to strand an item: a queued row that reached the ledger without
being handed to an actor, and a session whose actor fails on every start (its
stored queue override is damaged) until the registry gives up on it. While
the daemon is down nobody knows the actors, and doctor says so.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from tests import ledger_db
from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from tests.integration.test_doctor import doctor
from wire.client import BrokerClient

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["trio"])]

STUCK_AFTER_S = 0.3


async def health(d: DaemonProcess) -> dict[str, Any]:
    async with await BrokerClient.connect(d.socket) as op:
        result: dict[str, Any] = await op.op("health")
    return result


async def stuck_in(d: DaemonProcess, label: str) -> dict[str, Any]:
    """Health once it names `label` among the stuck items."""
    while True:
        said = await health(d)
        if any(s["session"] == label for s in said["stuck_items"]):
            return said
        await anyio.sleep(0.05)


async def test_an_item_no_actor_was_handed_is_named(make_daemon: DaemonFactory) -> None:
    d = make_daemon({"queue": {"stuck_after_s": STUCK_AFTER_S}})
    assert (await health(d))["stuck_items"] == []
    now = int(time.time() * 1000)
    with ledger_db.connect(d.ledger, timeout=5) as db:  # beside the daemon's writer, as WAL allows
        db.execute(
            "INSERT INTO sessions (label, kind, origin, created_at, updated_at)"
            " VALUES ('dm:ent_stranded', 'dm', 'inbound', ?, ?)",
            (now, now),
        )
        db.execute(
            "INSERT INTO queue_items (id, session_label, source, status, payload,"
            " created_at, updated_at) VALUES ('i1', 'dm:ent_stranded', 'operator', 'queued',"
            " 'do this', ?, ?)",
            (now, now),
        )
    with anyio.fail_after(5):
        said = await stuck_in(d, "dm:ent_stranded")
    assert said["ok"] is False
    assert said["stuck_items"][0]["items"] == 1
    assert said["stuck_items"][0]["why"] == "no actor was handed them"
    assert said["stuck_items"][0]["waiting_s"] >= STUCK_AFTER_S
    assert said["problems"] == [
        "1 item(s) in 1 session(s) wait with no actor to run them (see stuck_items)"
    ]
    code, findings = await anyio.to_thread.run_sync(doctor, d.config_path)
    assert code == 1
    stuck = [f for f in findings if f["check"] == "stuck_items"]
    assert [f["level"] for f in stuck] == ["fail"]
    assert "dm:ent_stranded" in stuck[0]["message"] and "restart" in stuck[0]["fix"]
    assert [f["level"] for f in findings if f["check"] == "daemon"] == ["ok"]

    d.terminate()  # down: doctor cannot know the actors, and says so
    code, findings = await anyio.to_thread.run_sync(doctor, d.config_path)
    stuck = [f for f in findings if f["check"] == "stuck_items"]
    assert [f["level"] for f in stuck] == ["warn"]
    assert "daemon is down" in stuck[0]["message"] and "1 waiting item" in stuck[0]["message"]
    assert "cannot be known" in stuck[0]["message"]


async def failing_session(d: DaemonProcess) -> str:
    """A session whose next actor fails at start: its stored queue override is damaged."""
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        await c.send(
            {
                "type": "inbound",
                "req": "1",
                "msg_id": "m1",
                "sender_id": "+1",
                "peer_kind": "dm",
                "text": "hello",
            }
        )
        with anyio.fail_after(10):
            while (frame := await c.recv())["type"] != "deliver":
                pass
        label = str(frame["session"])
        with anyio.fail_after(10):
            while (await health(d))["actors"]:  # noqa: ASYNC110 - until the actor retires
                await anyio.sleep(0.05)
        with ledger_db.connect(d.ledger, timeout=5) as db:
            db.execute("UPDATE sessions SET queue_override = '{damaged' WHERE label = ?", (label,))
        await c.send(
            {
                "type": "inbound",
                "req": "2",
                "msg_id": "m2",
                "sender_id": "+1",
                "peer_kind": "dm",
                "text": "again",
            }
        )
        with anyio.fail_after(5):
            assert (await c.recv())["type"] == "ack"
    return label


def failures_logged(d: DaemonProcess) -> int:
    return sum('"actor failed"' in line for line in d.log_lines())


@pytest.mark.slow
async def test_an_actor_that_fails_for_good_strands_its_items(make_daemon: DaemonFactory) -> None:
    d = make_daemon({"queue": {"stuck_after_s": STUCK_AFTER_S, "idle_stop_s": 0.2}})
    label = await failing_session(d)
    # Restarted five times with a growing back-off (6.2 s in all), then given up.
    with anyio.fail_after(15):
        while "actor keeps failing" not in d.log():  # noqa: ASYNC110 - reads the daemon's log
            await anyio.sleep(0.1)
    with anyio.fail_after(5):
        said = await stuck_in(d, label)
    entry = next(s for s in said["stuck_items"] if s["session"] == label)
    assert entry["why"] == "its actor failed 6 times and is not restarted"
    assert said["ok"] is False
    code, findings = await anyio.to_thread.run_sync(doctor, d.config_path)
    assert code == 1
    assert any(
        f["check"] == "stuck_items" and f["level"] == "fail" and label in f["message"]
        for f in findings
    )


@pytest.mark.slow
async def test_sigterm_does_not_wait_out_an_actor_back_off(make_daemon: DaemonFactory) -> None:
    d = make_daemon({"queue": {"idle_stop_s": 0.2}, "shutdown_grace_s": 0.5})
    await failing_session(d)
    with anyio.fail_after(10):
        while failures_logged(d) < 5:  # noqa: ASYNC110 - reads the daemon's log
            await anyio.sleep(0.02)
    # Now in its longest back-off (3.2 s) before a sixth try.
    assert d.proc is not None
    started = time.monotonic()
    code = await anyio.to_thread.run_sync(d.terminate)
    took = time.monotonic() - started
    assert code == 0
    assert took < 1.5, f"took {took:.2f}s"
