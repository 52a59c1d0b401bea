"""The ledger's WAL stays short under a steady stream of writes (ledger/writer/checkpoint.py)."""

from __future__ import annotations

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.integration.wire import op
from wire.client import BrokerClient

pytestmark = pytest.mark.anyio

MESSAGES = 4000  # small transactions: ~4 WAL frames each, ~60 MiB if never checkpointed
WINDOW = 4


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("writer", ["process", "thread"])
async def test_the_wal_stays_short_under_a_steady_stream(
    make_daemon: DaemonFactory, writer: str
) -> None:
    # Collect mode with a long quiet period: no turns, only the ingest writes.
    d = make_daemon({"ledger": {"writer": writer}, "queue": {"debounce_ms": 600_000}})
    largest = 0
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        for start in range(0, MESSAGES, WINDOW):
            for i in range(start, start + WINDOW):
                await c.send(
                    {
                        "type": "inbound",
                        "msg_id": f"m{i}",
                        "sender_id": f"+{i % 50}",
                        "peer_kind": "dm",
                        "text": f"message {i} " * 20,
                        "queue_mode": "collect",
                    }
                )
            acks = 0
            with anyio.fail_after(30):
                while acks < WINDOW:
                    frame = await c.recv()
                    assert frame["type"] == "ack", frame
                    acks += 1
            largest = max(largest, d.ledger.with_name(d.ledger.name + "-wal").stat().st_size)
    health = await op(d, "health")
    assert health["queued"] > 0 and 0 < health["wal_bytes"] <= largest
    assert largest < 40 << 20
