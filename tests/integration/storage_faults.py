"""Helpers of the tests where the ledger's storage fails and comes back (a full
disk, a PostgreSQL server killed): a frame answered, health awaited, and what an
adapter must see once the storage is back."""

from __future__ import annotations

from typing import Any

import anyio

from wire.client import BrokerClient

WAIT = 10.0


async def answer(c: BrokerClient, frame: dict[str, Any]) -> dict[str, Any]:
    await c.send(frame)
    with anyio.fail_after(WAIT):
        return await c.recv_until(frame["req"])


async def until_health(operator: BrokerClient, ok: bool, wait: float = WAIT) -> dict[str, Any]:
    with anyio.fail_after(wait):
        while True:
            found: dict[str, Any] = await operator.op("health")
            if found["ok"] is ok:
                return found
            await anyio.sleep(0.05)


async def storage_back(
    adapter: BrokerClient,
    operator: BrokerClient,
    held: dict[str, Any] | None,
    refused: list[dict[str, Any]],
    acked: dict[str, dict[str, Any]],
) -> None:
    """The storage is back: the held message is acked without being sent again, the
    daemon is healthy, and the refused ones are accepted when the adapter resends
    them (each new, none a duplicate). Records every ack in `acked`."""
    if held is not None:
        with anyio.fail_after(WAIT):
            reply = await adapter.recv_until(held["req"])
        assert reply["type"] == "ack" and reply["duplicate"] is False, reply
        acked[held["msg_id"]] = reply
    await until_health(operator, ok=True)
    for frame in refused:
        retry = await answer(adapter, frame)
        assert retry["type"] == "ack" and retry["duplicate"] is False, retry
        acked[frame["msg_id"]] = retry
