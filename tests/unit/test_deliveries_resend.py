"""What a connecting adapter is sent: each pending reply once, oldest first, all of them.

The writer commits in its own process, so the ledger can show an outbox row as
pending before the daemon has heard that it committed. `adapter_connected`
reads the pending rows in pages while replies keep committing; whatever the
order of those steps, the new adapter must get each reply exactly once, and no
live reply may overtake an older one.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import orjson
import pytest

from broker.connection import Connection
from broker.deliveries import Deliveries
from ledger import turns
from ledger.port.protocols import DeliveryPort, OutboxKey, OutboxRow

pytestmark = pytest.mark.anyio

CHANNEL, SESSION, OUT = "chat", "dm:someone", "out-1"


def frame(out_id: str, size: int = 0) -> str:
    return orjson.dumps({"type": "deliver", "out_id": out_id, "text": "x" * size}).decode()


FRAME = frame(OUT)


@dataclass(eq=False)
class FakeConn:
    id: str
    channel: str
    closed: bool = False
    sent: list[str] = field(default_factory=list)
    flushes: int = 0
    unflushed: int = 0  # bytes posted since the last wait for the socket
    most_unflushed: int = 0

    def post(self, data: bytes, droppable: bool = False) -> bool:
        if self.closed:
            return False
        self.sent.append(orjson.loads(data)["out_id"])
        self.unflushed += len(data)
        self.most_unflushed = max(self.most_unflushed, self.unflushed)
        return True

    async def flushed(self) -> None:
        self.flushes += 1
        self.unflushed = 0
        await anyio.lowlevel.checkpoint()


class Outbox:
    """The ledger as a reader sees it: an outbox table (the real query runs on it),
    and `during`, run while a read is under way."""

    def __init__(self) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute(
            "CREATE TABLE outbox (out_id TEXT PRIMARY KEY, session_label TEXT, channel TEXT,"
            " frame TEXT, created_at INTEGER, status TEXT, delivered_at INTEGER)"
        )
        self.reads = 0
        self.during: Callable[[int], None] = lambda read: None
        self.after: Callable[[], None] = lambda: None  # once the read took its snapshot
        self.writer = Writer()

    def add(self, out_id: str, at: int = 0, body: str | None = None) -> None:
        self.conn.execute(
            "INSERT INTO outbox (out_id, session_label, channel, frame, created_at, status)"
            " VALUES (?, ?, ?, ?, ?, 'pending')",
            (out_id, SESSION, CHANNEL, body or frame(out_id), at),
        )

    async def pending_outbox(
        self, channel: str, limit: int, after: OutboxKey | None = None
    ) -> list[OutboxRow]:
        self.reads += 1
        self.during(self.reads)
        await anyio.lowlevel.checkpoint()
        rows = [OutboxRow(*r) for r in turns.pending_outbox(self.conn, channel, limit, after)]
        self.after()
        return rows

    async def admit(self) -> None:
        pass  # always room: the test's writer keeps every job

    def submit_delivered(self, out_ids: list[str], now: int) -> Pending:
        return self.writer.submit_lazy(turns.mark_delivered, out_ids, now)


class Writer:
    """Records lazy jobs; `commit_all` reports them committed, as the writer would."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Any, tuple[Any, ...], Pending]] = []

    def submit_lazy(self, fn: Any, *args: Any) -> Pending:
        pending = Pending()
        self.jobs.append((fn, args, pending))
        return pending

    def commit_all(self, conn: sqlite3.Connection) -> None:
        jobs, self.jobs = self.jobs, []
        for fn, args, pending in jobs:
            pending.done(fn(conn, *args))


class Pending:
    """Resolved by `Writer.commit_all`; `record_confirmations` (not run here) would act."""

    def done(self, result: Any) -> None:
        self.result = result


def deliveries_over(outbox: Outbox, **kwargs: int) -> Deliveries:
    return Deliveries(cast(DeliveryPort, outbox), **kwargs)


async def connect(deliveries: Deliveries, conn: FakeConn) -> None:
    await deliveries.adapter_connected(cast(Connection, conn))


# -- a reply committing while an adapter connects ------------------------------------

Step = Callable[[Deliveries, Outbox, FakeConn], Awaitable[None]]


async def committed_then_connected(d: Deliveries, outbox: Outbox, conn: FakeConn) -> None:
    outbox.add(OUT)
    d.deliver(OUT, CHANNEL, SESSION, FRAME)  # no adapter yet: the ledger keeps it
    await connect(d, conn)


async def reported_while_reading(d: Deliveries, outbox: Outbox, conn: FakeConn) -> None:
    outbox.add(OUT)  # the read sees the row
    outbox.during = lambda _: d.deliver(OUT, CHANNEL, SESSION, FRAME)
    await connect(d, conn)


async def reported_while_reading_row_unseen(d: Deliveries, outbox: Outbox, conn: FakeConn) -> None:
    def commit_and_report(_: int) -> None:
        d.deliver(OUT, CHANNEL, SESSION, FRAME)
        outbox.add(OUT)  # (a real read runs on a snapshot from before the commit)

    outbox.during = commit_and_report
    await connect(d, conn)


async def reported_after_reading(d: Deliveries, outbox: Outbox, conn: FakeConn) -> None:
    outbox.add(OUT)  # committed, but not reported yet
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
    deliveries = deliveries_over(outbox)
    deliveries.expect(OUT)  # the turn's commit is on its way to the writer
    conn = FakeConn("conn-1", CHANNEL)
    await steps(deliveries, outbox, conn)
    assert conn.sent == [OUT]
    assert OUT in deliveries.unconfirmed  # and it stays owed until `delivered`


async def test_a_reply_whose_commit_failed_is_sent_when_the_row_is_there() -> None:
    # A commit reported as failed may still have committed (the writer died after
    # COMMIT): the row is resent by the next connect, as any pending row is.
    outbox = Outbox()
    deliveries = deliveries_over(outbox)
    deliveries.expect(OUT)
    outbox.add(OUT)
    deliveries.abandon(OUT)
    conn = FakeConn("conn-1", CHANNEL)
    await connect(deliveries, conn)
    assert conn.sent == [OUT]


async def test_a_connect_skips_only_the_replies_still_committing() -> None:
    outbox = Outbox()
    deliveries = deliveries_over(outbox)
    deliveries.expect(OUT)
    outbox.add("out-0", at=0)
    outbox.add(OUT, at=1)
    conn = FakeConn("conn-1", CHANNEL)
    await connect(deliveries, conn)
    assert conn.sent == ["out-0"]  # the older one now; the committing one when reported
    deliveries.deliver(OUT, CHANNEL, SESSION, FRAME)
    assert conn.sent == ["out-0", OUT]


# -- a long backlog ------------------------------------------------------------------


def backlog(outbox: Outbox, count: int, size: int = 0) -> list[str]:
    ids = [f"old-{n:05d}" for n in range(count)]
    for n, out_id in enumerate(ids):
        outbox.add(out_id, at=n // 7, body=frame(out_id, size))  # ties on created_at too
    return ids


async def test_a_backlog_longer_than_a_page_is_sent_whole_once_in_order() -> None:
    outbox = Outbox()
    ids = backlog(outbox, 2_500, size=100)
    deliveries = deliveries_over(outbox, resend_page=1_000, resend_flush_bytes=50_000)
    conn = FakeConn("conn-1", CHANNEL)
    await connect(deliveries, conn)
    assert conn.sent == ids
    assert outbox.reads == 3  # 1,000 + 1,000 + 500
    # It waited for the socket between pages and within them, so the connection's
    # output never held more than the flush size and a frame.
    frame_bytes = len(frame("old-00000", 100)) + 1
    assert conn.flushes > 2  # the two page ends, and within pages
    assert conn.most_unflushed <= 50_000 + frame_bytes


async def test_a_live_reply_for_the_connecting_adapter_waits_behind_its_backlog() -> None:
    outbox = Outbox()
    ids = backlog(outbox, 25)
    deliveries = deliveries_over(outbox, resend_page=10)

    def a_turn_ends(read: int) -> None:
        if read == 2:  # mid-backlog
            outbox.add("live", at=1_000)
            deliveries.deliver("live", CHANNEL, SESSION, frame("live"))

    outbox.during = a_turn_ends
    conn = FakeConn("conn-1", CHANNEL)
    await connect(deliveries, conn)
    assert conn.sent == [*ids, "live"]  # once, and after every older reply
    deliveries.deliver("later", CHANNEL, SESSION, frame("later"))
    assert conn.sent[-1] == "later"  # the backlog is out: live replies go at once


async def test_held_replies_go_to_another_adapter_when_the_connecting_one_leaves() -> None:
    outbox = Outbox()
    deliveries = deliveries_over(outbox)
    staying, leaving = FakeConn("conn-2", CHANNEL), FakeConn("conn-1", CHANNEL)
    await connect(deliveries, staying)  # nothing pending yet
    outbox.add("pending", at=0)
    session = next(s for s in (f"dm:s{n}" for n in range(100)) if goes_to(s, leaving, staying))

    def a_turn_ends_and_the_adapter_leaves(_: int) -> None:
        outbox.add("live", at=1)
        deliveries.deliver("live", CHANNEL, session, frame("live"))  # held for `leaving`
        leaving.closed = True

    outbox.during = a_turn_ends_and_the_adapter_leaves
    await connect(deliveries, leaving)
    deliveries.adapter_gone(cast(Connection, leaving))
    assert leaving.sent == []
    assert staying.sent == ["live"]  # routed anew when its adapter left
    assert deliveries.unconfirmed["live"][3] == staying.id
    # ("pending" waits in the ledger for the next connect: it was never sent.)


def goes_to(session: str, conn: FakeConn, other: FakeConn) -> bool:
    """Whether rendezvous hashing sends `session` to `conn` rather than `other`."""
    key = session.encode()
    return max((conn, other), key=lambda c: zlib.crc32(key, zlib.crc32(c.id.encode()))) is conn


async def test_a_reply_no_adapter_can_take_is_left_to_the_ledger() -> None:
    outbox = Outbox()
    deliveries = deliveries_over(outbox)
    outbox.add(OUT)
    deliveries.deliver(OUT, CHANNEL, SESSION, FRAME)  # no adapter of the channel
    assert OUT not in deliveries.unconfirmed  # not held in memory for ever
    conn = FakeConn("conn-1", CHANNEL)
    await connect(deliveries, conn)
    assert conn.sent == [OUT]


async def test_an_adapter_gone_before_its_connect_ran_is_not_kept() -> None:
    # The resend runs as a task of the connection; the connection may close and
    # `adapter_gone` run before that task gets to its first step.
    deliveries = deliveries_over(Outbox())
    conn = FakeConn("conn-1", CHANNEL, closed=True)
    deliveries.adapter_gone(cast(Connection, conn))
    await connect(deliveries, conn)
    assert deliveries.adapters.get(CHANNEL, []) == []


async def test_a_confirmation_recorded_after_the_page_was_read_is_not_resent() -> None:
    outbox = Outbox()
    deliveries = deliveries_over(outbox)
    first = FakeConn("conn-1", CHANNEL)
    await connect(deliveries, first)
    outbox.add(OUT)
    deliveries.deliver(OUT, CHANNEL, SESSION, FRAME)
    await deliveries.on_delivered(cast(Connection, first), {"out_id": OUT})
    first.closed = True
    deliveries.adapter_gone(cast(Connection, first))

    # The next adapter's read sees the row still pending; the confirmation's record
    # commits, and is reported, before the page is sent.
    outbox.after = lambda: outbox.writer.commit_all(outbox.conn)
    second = FakeConn("conn-2", CHANNEL)
    await connect(deliveries, second)
    assert outbox.conn.execute("SELECT status FROM outbox").fetchall() == [("delivered",)]
    assert first.sent == [OUT] and second.sent == []
