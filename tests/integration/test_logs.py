"""logs.follow streams live records, filtered by session and level."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests.harness import DaemonProcess
from wire.client import BrokerClient, BrokerError

pytestmark = pytest.mark.anyio


async def send(d: DaemonProcess, sender: str, msg_id: str) -> dict[str, Any]:
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        await c.send(
            {
                "type": "inbound",
                "req": "r",
                "msg_id": msg_id,
                "sender_id": sender,
                "peer_kind": "dm",
                "text": "hello",
            }
        )
        with anyio.fail_after(10):
            ack = await c.recv()
            while (await c.recv())["type"] != "deliver":
                pass
    return ack


async def next_log(client: BrokerClient) -> dict[str, Any]:
    with anyio.fail_after(10):
        while True:
            frame = await client.recv()
            if frame["type"] == "log":
                return frame


async def test_follow_one_session(daemon: DaemonProcess) -> None:
    first = await send(daemon, "+1", "m1")
    async with await BrokerClient.connect(daemon.socket) as op:
        data = await op.op("logs.follow", session=first["session"])
        assert data == {"following": True, "session": first["session"], "level": "info"}
        await send(daemon, "+2", "m2")  # another session: filtered out
        await send(daemon, "+1", "m3")
        record = await next_log(op)
    assert record["session"] == first["session"]
    assert record["event"] == "turn completed"
    assert record["msg_ids"] == ["m3"]
    assert record["level"] == "info" and "timestamp" in record


async def test_level_filter_and_bad_level(daemon: DaemonProcess) -> None:
    async with await BrokerClient.connect(daemon.socket) as op:
        with pytest.raises(BrokerError) as err:
            await op.op("logs.follow", level="loud")
        assert err.value.code == "invalid" and err.value.field == "level"
        await op.op("logs.follow", level="warning")
        await send(daemon, "+3", "m4")  # an info record only
        with anyio.move_on_after(0.5) as scope:
            await next_log(op)
        assert scope.cancelled_caught, "an info record passed a warning filter"
