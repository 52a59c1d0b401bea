"""Timers through the port: add, list, cancel, fire due ones exactly once, missed
firings collapsed, system sessions, not_found."""

from __future__ import annotations

import orjson
import pytest

from core.timers import parse_spec
from ledger.port.errors import NotFound
from ledger.port.protocols import ItemInfo, LedgerPort
from tests.conformance.records import inbound, ingest, tick

pytestmark = pytest.mark.anyio


def _msg_id(item: ItemInfo) -> str:
    return str(orjson.loads(item.payload or "{}")["msg_id"])


async def _person_session(port: LedgerPort) -> str:
    return (await ingest(port, inbound(f"m-{tick()}", sender="alice"))).session


async def test_add_lists_and_cancel_ends_a_timer(port: LedgerPort) -> None:
    label = await _person_session(port)
    now = tick()
    once = await port.add_timer(label, parse_spec("once", 30, None, None, now), now)
    every = await port.add_timer(label, parse_spec("tick", 10, None, 60, now), now)
    assert (once.next_at, every.next_at) == (now + 30_000, now + 10_000)
    listed = await port.list_timers(label)
    assert [(t.timer, t.text, t.every_s, t.fired) for t in listed] == [
        (every.timer, "tick", 60.0, 0),
        (once.timer, "once", None, 0),
    ]
    assert await port.list_timers(None) == listed
    assert await port.next_timer_at() == now + 10_000
    await port.cancel_timer(every.timer, tick())
    assert [t.timer for t in await port.list_timers(label)] == [once.timer]
    assert await port.next_timer_at() == now + 30_000
    # A cancelled timer never fires.
    assert await port.fire_due_timers(now + 3_600_000, 100) != []
    assert await port.fire_due_timers(now + 7_200_000, 100) == []
    with pytest.raises(NotFound) as caught:
        await port.cancel_timer(every.timer, tick())
    assert caught.value.field == "timer"


async def test_a_due_timer_fires_one_queue_item_once(port: LedgerPort) -> None:
    label = await _person_session(port)
    now = tick()
    timer = await port.add_timer(label, parse_spec("remind me", 5, None, None, now), now)
    assert await port.fire_due_timers(now + 4_999, 100) == []
    items = await port.fire_due_timers(now + 5_000, 100)
    assert [(i.session, i.source, i.mode, i.status, i.content) for i in items] == [
        (label, "timer", "followup", "queued", "remind me")
    ]
    assert _msg_id(items[0]) == f"timer:{timer.timer}:1"
    # The same moment again, or a clock stepped back: nothing more.
    assert await port.fire_due_timers(now + 5_000, 100) == []
    assert await port.fire_due_timers(now + 1_000, 100) == []
    assert await port.list_timers(label) == []  # a one-shot timer that fired is done
    assert await port.next_timer_at() is None
    waiting = [i for i in await port.open_items(label) if i.source == "timer"]
    assert [i.id for i in waiting] == [items[0].id]


async def test_missed_due_times_fire_once_then_follow_the_grid(port: LedgerPort) -> None:
    label = await _person_session(port)
    now = tick()
    timer = await port.add_timer(label, parse_spec("beat", 0, None, 1, now), now)
    first = await port.fire_due_timers(now, 100)
    assert [_msg_id(i) for i in first] == [f"timer:{timer.timer}:1"]
    # Five due times pass unseen (a daemon that was down): one firing for all.
    late = now + 5_500
    second = await port.fire_due_timers(late, 100)
    assert [_msg_id(i) for i in second] == [f"timer:{timer.timer}:2"]
    assert await port.fire_due_timers(late, 100) == []
    (listed,) = await port.list_timers(label)
    assert (listed.fired, listed.next_at) == (2, now + 6_000)
    third = await port.fire_due_timers(now + 6_000, 100)
    assert [_msg_id(i) for i in third] == [f"timer:{timer.timer}:3"]


async def test_fire_timer_fires_one_timer_only_when_due(port: LedgerPort) -> None:
    label = await _person_session(port)
    now = tick()
    beat = await port.add_timer(label, parse_spec("beat", 5, None, 10, now), now)
    other = await port.add_timer(label, parse_spec("other", 5, None, None, now), now)
    early = await port.fire_timer(beat.timer, now + 4_999)
    assert (early.items, early.next_at) == ([], now + 5_000)
    fired = await port.fire_timer(beat.timer, now + 5_000)
    assert [_msg_id(i) for i in fired.items] == [f"timer:{beat.timer}:1"]
    assert fired.next_at == now + 15_000
    # Woken again at the same moment (a retried activity): nothing more.
    again = await port.fire_timer(beat.timer, now + 5_000)
    assert (again.items, again.next_at) == ([], now + 15_000)
    # The other timer, due too, was left alone.
    assert [t.timer for t in await port.list_timers(label)] == [other.timer, beat.timer]
    await port.cancel_timer(beat.timer, tick())
    gone = await port.fire_timer(beat.timer, now + 60_000)
    assert (gone.items, gone.next_at) == ([], None)
    unknown = await port.fire_timer("tmr_nope", now)
    assert (unknown.items, unknown.next_at) == ([], None)
    last = await port.fire_timer(other.timer, now + 5_000)
    assert [_msg_id(i) for i in last.items] == [f"timer:{other.timer}:1"]
    assert last.next_at is None  # a one-shot timer that fired is done


async def test_many_due_timers_fire_in_batches_of_the_limit(port: LedgerPort) -> None:
    label = await _person_session(port)
    now = tick()
    added = [
        await port.add_timer(label, parse_spec(f"t{k}", 1, None, None, now), now) for k in range(7)
    ]
    batches = [await port.fire_due_timers(now + 1_000, 3) for _ in range(4)]
    assert [len(b) for b in batches] == [3, 3, 1, 0]
    fired = [_msg_id(i) for b in batches for i in b]
    assert sorted(fired) == sorted(f"timer:{t.timer}:1" for t in added)


async def test_a_system_label_is_created_and_other_unknowns_are_not_found(
    port: LedgerPort,
) -> None:
    now = tick()
    timer = await port.add_timer("system:heartbeat", parse_spec("beat", 1, None, 60, now), now)
    assert timer.session == "system:heartbeat"
    shown = await port.session_show("system:heartbeat", 10)
    assert (shown["kind"], shown["status"]) == ("system", "active")
    # A second timer on it finds the session it made.
    await port.add_timer("system:heartbeat", parse_spec("again", 1, None, None, now), now)
    assert len(await port.list_timers("system:heartbeat")) == 2
    before = await port.sessions_list(None, 100)
    for name in ("dm:ent_nobody", "system:", "System:Heartbeat", "heartbeat"):
        with pytest.raises(NotFound) as caught:
            await port.add_timer(name, parse_spec("x", 1, None, None, now), now)
        assert caught.value.field == "session"
        with pytest.raises(NotFound):
            await port.list_timers(name)
    assert await port.sessions_list(None, 100) == before
    assert len(await port.list_timers(None)) == 2
