from __future__ import annotations

import pytest

from broker.client import BrokerClient
from tests.harness import DaemonProcess

pytestmark = pytest.mark.anyio


async def test_inbound_is_acked_and_listed(any_backend_daemon: DaemonProcess) -> None:
    d = any_backend_daemon
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        await c.send(
            {
                "type": "inbound",
                "req": "r1",
                "msg_id": "m1",
                "sender_id": "+1",
                "peer_kind": "dm",
                "text": "hi",
            }
        )
        ack = await c.recv()
    assert ack["type"] == "ack"
    assert ack["req"] == "r1"
    assert ack["duplicate"] is False
    assert ack["session"].startswith("dm:ent_")
    async with await BrokerClient.connect(d.socket) as op:
        sessions = await op.op("sessions.list")
    assert [s["label"] for s in sessions] == [ack["session"]]
    assert sessions[0]["queued"] == 1
