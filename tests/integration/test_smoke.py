"""One message in, one reply out, on the daemon under asyncio and under trio."""

from __future__ import annotations

import anyio
import pytest

from tests.harness import DaemonProcess
from wire.client import BrokerClient

pytestmark = pytest.mark.anyio


async def test_message_is_acked_answered_and_listed(any_backend_daemon: DaemonProcess) -> None:
    d = any_backend_daemon
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        await c.send(
            {
                "type": "inbound",
                "req": "r1",
                "msg_id": "m1",
                "sender_id": "+1",
                "peer_kind": "dm",
                "text": "hi there",
            }
        )
        with anyio.fail_after(10):
            ack = await c.recv()
            deliver = await c.recv()
            while deliver["type"] != "deliver":
                deliver = await c.recv()
        await c.send({"type": "delivered", "out_id": deliver["out_id"]})
    assert ack["type"] == "ack" and ack["req"] == "r1" and ack["duplicate"] is False
    assert ack["session"].startswith("dm:ent_")
    assert deliver["text"] == "hi there" and deliver["in_reply_to"] == ["m1"]
    assert deliver["status"] == "final" and deliver["session"] == ack["session"]
    async with await BrokerClient.connect(d.socket) as op:
        sessions = await op.op("sessions.list")
        shown = await op.op("session.show", session=ack["session"])
        health = await op.op("health")
    assert [(s["label"], s["turns"], s["queued"]) for s in sessions] == [(ack["session"], 1, 0)]
    assert [(t["inputs"], t["output"], t["status"]) for t in shown["turns"]] == [
        (["m1"], "hi there", "completed")
    ]
    # At least the ingest, the turn's start and its commit went through the writer.
    assert health["writer_jobs"] >= 3
    assert 1 <= health["writer_commits"] <= health["writer_jobs"]
    assert health["wal_bytes"] > 0
