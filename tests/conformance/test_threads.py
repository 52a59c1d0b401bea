"""Threads and resets through the port: a reset decided in the ingest transaction,
its cut (idempotent, with a carry-over), `session.threads`, an operator's reset and
cancelling a waiting item."""

from __future__ import annotations

import pytest

from core.identity import SessionSpec
from core.resets import ResetPolicy
from ledger.port.errors import Conflict, NotFound
from ledger.port.protocols import Carry, LedgerPort
from plumbing.ids import new_id
from tests.conformance.records import inbound, ingest, tick, turn

pytestmark = pytest.mark.anyio
EVERY_MESSAGE_IS_LATE = SessionSpec(None, None, ResetPolicy(idle_s=0.001))
TWO_TURNS = SessionSpec(None, None, ResetPolicy(max_turns=2))


async def run_open_items(port: LedgerPort, session: str, head: str | None) -> str | None:
    """Run the waiting items as one turn from `head`; the new head."""
    items = await port.open_items(session)
    if not items:
        return head
    rec = turn(session, head, items)
    await port.submit_turn(rec).result()
    return rec.turn_id


async def test_an_idle_message_decides_a_thread_its_cut_begins(port: LedgerPort) -> None:
    first = await port.submit_inbound(inbound("m1"), EVERY_MESSAGE_IS_LATE, tick()).result()
    assert first.thread is None  # the session's first message: nothing is stale yet
    session = first.session
    head = await run_open_items(port, session, None)
    late = await port.submit_inbound(inbound("m2"), EVERY_MESSAGE_IS_LATE, tick()).result()
    assert late.thread == (2, "idle")
    start = await port.session_start(session)
    assert start.start.pending_thread == (2, "idle", (await port.open_items(session))[0].seq)
    assert start.start.head == head  # the cut waits for the actor
    listed = await port.list_threads(session)
    assert [(t["thread"], t["reason"], t["head"], t["turns"]) for t in listed] == [
        (1, "first", head, 1),
        (2, "idle", None, 0),
    ]
    await port.submit_new_thread(session, tick(), 2, "idle").result()
    await port.submit_new_thread(session, tick(), 2, "idle").result()  # begun already: no-op
    start = await port.session_start(session)
    assert (start.start.pending_thread, start.start.head) == (None, None)
    head2 = await run_open_items(port, session, None)
    listed = await port.list_threads(session)
    assert [(t["thread"], t["reason"], t["head"], t["turns"]) for t in listed] == [
        (1, "first", head, 1),
        (2, "idle", head2, 1),
    ]
    assert listed[0]["ended_at"] == listed[1]["started_at"]


async def test_a_rollover_begins_from_its_carry_over(port: LedgerPort) -> None:
    acc = await port.submit_inbound(inbound("c1"), TWO_TURNS, tick()).result()
    session = acc.session
    head = await run_open_items(port, session, None)
    await port.submit_inbound(inbound("c2"), TWO_TURNS, tick()).result()
    head = await run_open_items(port, session, head)
    third = await port.submit_inbound(inbound("c3"), TWO_TURNS, tick()).result()
    assert third.thread == (2, "turn_limit")
    before = await port.session_state(session)
    carry = Carry(new_id(), "Summary: alice likes tea.")
    await port.submit_new_thread(session, tick(), 2, "turn_limit", carry).result()
    after = await port.session_state(session)  # the old thread's record, carried over
    assert before["focus"] is not None and after["focus"] == before["focus"]
    assert after["session"]["turns"] == before["session"]["turns"]
    start = await port.session_start(session)
    assert start.start.head == carry.turn_id
    assert start.thread is not None and start.thread.summary == carry.summary
    head3 = await run_open_items(port, session, carry.turn_id)
    listed = await port.list_threads(session)
    assert [(t["reason"], t["head"], t["turns"]) for t in listed] == [
        ("first", head, 2),
        ("turn_limit", head3, 1),  # the carry-over is not one of its turns
    ]


async def test_an_operator_reset_and_new(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("o1"))
    session = acc.session
    head = await run_open_items(port, session, None)
    assert await port.reset_session(session, "operator", tick()) == 2
    await port.submit_new_thread(session, tick(), 2, "operator").result()
    await port.submit_new_thread(session, tick()).result()  # `/new`: decided at its cut
    listed = await port.list_threads(session)
    assert [(t["thread"], t["reason"], t["turns"]) for t in listed] == [
        (1, "first", 1),
        (2, "operator", 0),
        (3, "new", 0),
    ]
    assert listed[0]["head"] == head
    assert [s["thread"] for s in await port.sessions_list(None, 10) if s["label"] == session] == [3]
    with pytest.raises(NotFound) as caught:
        await port.reset_session("dm:ent_nobody", "operator", tick())
    assert caught.value.field == "session"
    with pytest.raises(NotFound):
        await port.list_threads("dm:ent_nobody")


async def test_resets_decided_before_a_cut_begin_with_it(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("p1"))
    session = acc.session
    head = await run_open_items(port, session, None)
    assert await port.reset_session(session, "operator", tick()) == 2
    assert await port.reset_session(session, "operator", tick()) == 3
    await port.submit_new_thread(session, tick(), 3, "operator").result()
    assert (await port.session_start(session)).start.pending_thread is None
    listed = await port.list_threads(session)
    assert [(t["thread"], t["head"], t["turns"]) for t in listed] == [
        (1, head, 1),
        (2, None, 0),  # overtaken: begun and ended by the same cut
        (3, None, 0),
    ]


async def test_cancel_a_waiting_item(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("w1"))
    later = await ingest(port, inbound("w2"))
    await port.cancel_item(acc.session, later.item, tick())
    assert [i.id for i in await port.open_items(acc.session)] == [acc.item]
    with pytest.raises(Conflict):
        await port.cancel_item(acc.session, later.item, tick())  # cancelled already
    await port.submit_mark_running(new_id(), [acc.item], tick()).result()
    with pytest.raises(Conflict):
        await port.cancel_item(acc.session, acc.item, tick())  # running
    with pytest.raises(NotFound) as caught:
        await port.cancel_item(acc.session, "no-such-item", tick())
    assert caught.value.field == "item"
    other = await ingest(port, inbound("w3", sender="bob"))
    with pytest.raises(NotFound):
        await port.cancel_item(acc.session, other.item, tick())  # not of this session
