"""The actor's side of threads and cancels, on virtual time (the fakes of test_actor.py):
a cancel and the actor taking the item into a turn, exactly one wins; a rollover's cut
carries the summary and state, an explicit one does not."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from broker.context.session import SessionContext
from broker.mailbox.actor import SessionActor
from broker.mailbox.thread_start import ThreadRequest
from ledger.port.records import ActorStart, Carry
from tests.unit.test_actor import Ports, anyio_backend, item, ports_with

pytestmark = pytest.mark.anyio
__all__ = ["anyio_backend"]  # the fixture: trio on a MockClock


class ThreadPorts(Ports):
    """Ports whose session has a head and a summary, and that keep each cut."""

    cuts: list[tuple[str | None, int | None, str, Carry | None]]

    async def load(self, label: str) -> tuple[ActorStart, SessionContext]:
        ctx = SessionContext(self.counter)
        ctx.compacted("Alice likes tea.", ())
        return ActorStart("t0", None, None, 1, (0, 0), "dm", None), ctx

    def new_thread(
        self, label: str, previous: str | None, thread: int | None, reason: str, carry: Carry | None
    ) -> None:
        self.cuts.append((previous, thread, reason, carry))
        super().new_thread(label, previous, thread, reason, carry)


def thread_ports() -> ThreadPorts:
    base = ports_with()
    ports = ThreadPorts(base.settings)
    ports.cuts = []
    return ports


async def cancel_at(ports: Ports, when: float) -> tuple[str, list[list[str]]]:
    """Items 1 and 2 run for 3 virtual seconds each, one after the other; cancel item 2
    at `when`."""
    ports.engine.script = [3.0, 3.0]
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        actor.post(item(1, "first"))
        actor.post(item(2, "second"))
        await anyio.sleep(when)
        answer = actor.cancel("i2")
        await ports.retired.wait()
    return answer, [[i.id for i in rec.inputs] for rec in ports.commits]


async def test_a_waiting_item_cancelled_before_its_turn_never_runs() -> None:
    ports = ports_with()
    answer, ran = await cancel_at(ports, 2.9)
    assert (answer, ran) == ("cancelled", [["i1"]])
    assert [d for _, w, d in ports.log if w == "dropped"] == []  # item.cancel records it


async def test_an_item_taken_into_its_turn_cannot_be_cancelled() -> None:
    ports = ports_with()
    answer, ran = await cancel_at(ports, 3.01)  # the first turn ended at 3.0
    assert (answer, ran) == ("running", [["i1"], ["i2"]])


async def test_a_finished_item_is_left_to_the_ledger() -> None:
    ports = ports_with()
    answer, ran = await cancel_at(ports, 6.01)  # both turns ended: the ledger says conflict
    assert (answer, ran) == ("absent", [["i1"], ["i2"]])


async def test_an_item_the_actor_does_not_hold_yet_is_skipped_when_it_arrives() -> None:
    ports = ports_with()
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        assert actor.cancel("i1") == "absent"  # the ledger decides; the actor forgets it
        actor.post(item(1))
        actor.post(item(2))
        await ports.retired.wait()
    assert [[i.id for i in rec.inputs] for rec in ports.commits] == [["i2"]]


async def test_a_rollover_begins_from_the_summary_and_the_state() -> None:
    ports = thread_ports()
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        actor.post(ThreadRequest(2, "idle", from_seq=1))
        actor.post(ThreadRequest(2, "idle", from_seq=1))  # a second hand-over: taken once
        actor.post(item(1))
        await ports.retired.wait()
    [(previous, thread, reason, carry)] = ports.cuts
    assert (previous, thread, reason) == ("t0", 2, "idle")
    assert carry is not None
    assert carry.summary == "Alice likes tea."  # the state record is the ledger's to carry
    [rec] = ports.commits
    assert rec.parent_id == carry.turn_id  # the first turn of the thread follows it


async def test_an_explicit_reset_begins_empty() -> None:
    ports = thread_ports()
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        actor.post(ThreadRequest(2, "operator"))
        actor.post(item(1))
        await ports.retired.wait()
    assert ports.cuts == [("t0", 2, "operator", None)]
    [rec] = ports.commits
    assert rec.parent_id is None
    request: Any = ports.engine.calls[0][1]
    assert all("Alice likes tea" not in m.content for m in request.history)
