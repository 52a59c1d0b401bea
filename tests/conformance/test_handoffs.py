"""Hand-offs through the port, on both ledgers: the queued items nobody recorded as
handed to their runtime, in queue order, and a session's ones ahead of an item
(ledger/handoffs.py)."""

from __future__ import annotations

import pytest

from ledger.port.protocols import LedgerPort
from tests.conformance.records import inbound, ingest, tick

pytestmark = pytest.mark.anyio


async def test_unhanded_items_are_the_queued_ones_nobody_recorded(port: LedgerPort) -> None:
    a1 = await ingest(port, inbound(f"h-{tick()}", sender="ann"))
    b1 = await ingest(port, inbound(f"h-{tick()}", sender="bob"))
    a2 = await ingest(port, inbound(f"h-{tick()}", sender="ann"))
    a3 = await ingest(port, inbound(f"h-{tick()}", sender="ann"))
    later = tick() + 1_000
    assert [i.id for i in await port.unhanded_items(later, 10)] == [
        a1.item,
        b1.item,
        a2.item,
        a3.item,
    ]
    assert [i.id for i in await port.unhanded_items(later, 2)] == [a1.item, b1.item]
    assert [i.id for i in await port.unhanded_before(a1.session, a3.seq)] == [a1.item, a2.item]
    await port.submit_items_handed([a1.item, b1.item], tick()).result()
    assert [i.id for i in await port.unhanded_items(later, 10)] == [a2.item, a3.item]
    assert [i.id for i in await port.unhanded_before(a1.session, a3.seq)] == [a2.item]
    assert await port.unhanded_before(b1.session, b1.seq + 1_000) == []
