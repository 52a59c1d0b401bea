"""An adapter that connects while a reply's commit is on its way gets that reply once.

The writer commits in its own process, so the ledger can show an outbox row as
pending before the daemon has heard that it committed. `adapter_connected`
reads the pending rows at that moment; the reply's own `deliver` follows when
the commit is reported. Whatever the order of those steps, the new adapter must
get each reply exactly once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import orjson
import pytest

from broker.deliveries import Deliveries
from broker.server import Connection
from ledger.store import Ledger

pytestmark = pytest.mark.anyio

CHANNEL, SESSION, OUT = "chat", "dm:someone", "out-1"
FRAME = orjson.dumps({"type": "deliver", "out_id": OUT, "text": "hi"}).decode()


@dataclass(eq=False)
class FakeConn:
    id: str
    channel: str
    closed: bool = False
    sent: list[str] = field(default_factory=list)

    def post(self, data: bytes, droppable: bool = False) -> bool:
        self.sent.append(orjson.loads(data)["out_id"])
        return True


class Outbox:
    """The ledger as a reader sees it: `during` runs while the read is under way,
    and `rows` is what the read returns."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str]] = []
        self.during: Callable[[], None] = lambda: None

    async def read(self, fn: Any) -> list[tuple[str, str, str]]:
        self.during()
        await anyio.lowlevel.checkpoint()
        return list(self.rows)


async def connect(deliveries: Deliveries, conn: FakeConn) -> None:
    await deliveries.adapter_connected(cast(Connection, conn))


Step = Callable[[Deliveries, Outbox, FakeConn], Awaitable[None]]


async def committed_then_connected(d: Deliveries, outbox: Outbox, conn: FakeConn) -> None:
    outbox.rows = [(OUT, SESSION, FRAME)]
    d.deliver(OUT, CHANNEL, SESSION, FRAME)  # no adapter yet: it waits
    await connect(d, conn)


async def reported_while_reading(d: Deliveries, outbox: Outbox, conn: FakeConn) -> None:
    outbox.rows = [(OUT, SESSION, FRAME)]  # the read sees the row
    outbox.during = lambda: d.deliver(OUT, CHANNEL, SESSION, FRAME)
    await connect(d, conn)


async def reported_while_reading_row_unseen(d: Deliveries, outbox: Outbox, conn: FakeConn) -> None:
    outbox.during = lambda: d.deliver(OUT, CHANNEL, SESSION, FRAME)  # the read misses the row
    await connect(d, conn)


async def reported_after_reading(d: Deliveries, outbox: Outbox, conn: FakeConn) -> None:
    outbox.rows = [(OUT, SESSION, FRAME)]  # committed, but not reported yet
    await connect(d, conn)
    d.deliver(OUT, CHANNEL, SESSION, FRAME)


@pytest.mark.parametrize(
    "steps",
    [
        committed_then_connected,
        reported_while_reading,
        reported_while_reading_row_unseen,
        reported_after_reading,
    ],
)
async def test_a_reply_committing_while_an_adapter_connects_is_sent_once(steps: Step) -> None:
    outbox = Outbox()
    deliveries = Deliveries(cast(Ledger, outbox))
    deliveries.expect(OUT)  # the turn's commit is on its way to the writer
    conn = FakeConn("conn-1", CHANNEL)
    await steps(deliveries, outbox, conn)
    assert conn.sent == [OUT]
    assert OUT in deliveries.unconfirmed  # and it stays owed until `delivered`


async def test_a_reply_whose_commit_failed_is_sent_when_the_row_is_there() -> None:
    # A commit reported as failed may still have committed (the writer died after
    # COMMIT): the row is resent by the next connect, as any pending row is.
    outbox = Outbox()
    deliveries = Deliveries(cast(Ledger, outbox))
    deliveries.expect(OUT)
    outbox.rows = [(OUT, SESSION, FRAME)]
    deliveries.abandon(OUT)
    conn = FakeConn("conn-1", CHANNEL)
    await connect(deliveries, conn)
    assert conn.sent == [OUT]


async def test_a_connect_skips_only_the_replies_still_committing() -> None:
    outbox = Outbox()
    deliveries = Deliveries(cast(Ledger, outbox))
    deliveries.expect(OUT)
    outbox.rows = [("out-0", SESSION, FRAME.replace(OUT, "out-0")), (OUT, SESSION, FRAME)]
    conn = FakeConn("conn-1", CHANNEL)
    await connect(deliveries, conn)
    assert conn.sent == ["out-0"]  # the older one now; the committing one when reported
    deliveries.deliver(OUT, CHANNEL, SESSION, FRAME)
    assert conn.sent == ["out-0", OUT]
