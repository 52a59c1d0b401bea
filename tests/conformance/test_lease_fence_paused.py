"""A paused node's queued write lands after the retry took the lease
(ledger/port/fencing.py), deterministically, on two nodes of one PostgreSQL ledger.

Node A's attempt (itself a retry) holds the session's lease and hands its first write,
the recording of the session's cut-off turns, to its writer; then A is paused: its
writers run nothing more, its renewals included. Its lease lapses, node B's retry
takes it, marks the turn's items running and loads the session; then A resumes and
its queued write runs. Unfenced, that write records B's running turn as cut off,
moving the head, and B's commit is refused ("head moved under a running turn"); fenced
by A's superseded token, it changes nothing, and B's turn commits on the thread: one
answer, nothing recorded failed or aborted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from broker.runtime.temporal.session_lease import LeaseLost, SessionLease
from ledger import turns
from ledger.port.errors import HeadMoved, LeaseFenced
from ledger.port.fencing import FENCE
from ledger.port.protocols import LedgerPort
from ledger.writer.group_commit import BatchLink, LedgerWriter
from ledger.writer.jobs import JobSpec, Outcome
from plumbing.ids import new_id, now_ms
from tests.conformance.records import inbound, ingest, turn

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]
TTL_S = 2.0  # as tests/unit/test_session_lease.py: wide enough for a loaded machine


class Paused:
    """A node's writers while it is paused: the batches handed to them wait."""

    def __init__(self) -> None:
        self.on = False
        self.resumed = anyio.Event()

    def pause(self, writer: LedgerWriter) -> None:
        writer._link = _PausedLink(writer._link, self)


class _PausedLink:
    def __init__(self, inner: BatchLink, paused: Paused) -> None:
        self.inner, self.paused, self.depth = inner, paused, inner.depth

    async def send(self, jobs: list[JobSpec]) -> None:
        await self.inner.send(jobs)

    async def receive(self) -> list[Outcome]:
        if self.paused.on:
            await self.paused.resumed.wait()
        return await self.inner.receive()

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
async def two_nodes(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, Any]]:
    from ledger import postgres

    dsn = request.getfixturevalue("pg_conformance")
    async with postgres.open(dsn) as a, postgres.open(dsn) as b:
        yield a, b


@pytest.mark.parametrize("fence", [True, False], ids=["fenced", "unfenced"])
async def test_a_paused_nodes_queued_write_after_the_retry_took_the_lease(
    two_nodes: tuple[Any, Any], fence: bool
) -> None:
    a, b = two_nodes
    node_b: LedgerPort = b
    acc = await ingest(node_b, inbound("m1", text="hello"))
    label = acc.session
    paused = Paused()
    paused.pause(a.writer)
    paused.pause(a.lease_writer)
    queued: list[Any] = []

    async def attempt_on_a() -> None:
        if not fence:
            FENCE.set(None)  # as before the fence: its writes carry no token
        paused.on = True  # from its first write on, nothing of node A runs
        queued.append(a.writer.submit(turns.recover_crashed, now_ms(), label))
        await anyio.sleep_forever()  # its engine call

    lease_a = SessionLease(a, label, "node-a/turn#2", TTL_S, lambda: None)
    lease_b = SessionLease(b, label, "node-b/turn#3", TTL_S, lambda: None)
    turn_b = new_id()

    async def attempt_on_b() -> Any:
        await node_b.recover_crashed(now_ms(), session=label)  # nothing cut off yet
        items = await node_b.open_items(label)
        await node_b.submit_mark_running(turn_b, [i.id for i in items], now_ms()).result()
        start = await node_b.session_start(label)  # the retry loaded the session
        paused.on = False
        paused.resumed.set()  # node A resumes: its queued write runs
        with anyio.fail_after(30):
            await queued[0].wait()
        running = await node_b.open_items(label)
        rec = turn(label, start.start.head, running, "hi", outbox_channel="chat")
        rec.turn_id = turn_b
        return await node_b.submit_turn(rec).result()

    with anyio.fail_after(60):
        with pytest.raises(LeaseLost):  # its renewals stopped: its own clock cut it off
            await lease_a.run(attempt_on_a)
        if fence:
            assert await lease_b.run(attempt_on_b) == []
        else:
            with pytest.raises(HeadMoved):
                await lease_b.run(attempt_on_b)
            return
    with pytest.raises(LeaseFenced):
        queued[0].get()  # A's late write changed nothing
    shown = await node_b.session_show(label, 10)
    assert [(t["id"], t["status"]) for t in shown["turns"]] == [(turn_b, "completed")]
    assert shown["head"] == turn_b
    assert await node_b.open_items(label) == []
    outbox = await node_b.pending_outbox("chat", 10)
    assert len(outbox) == 1  # one answer
