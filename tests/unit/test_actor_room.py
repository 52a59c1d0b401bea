"""The actor's writes wait for room in the ledger's queue of writes (actor.py,
chat.py, running_turn.py), on virtual time: the fake ports of
test_actor.py have a queue of writes that a test fills (`make_room(False)`) and empties,
and an `admit` that waits at most `ledger.writer_wait_s` (virtual) seconds for room."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from broker.engines.base import Engine
from broker.mailbox.actor import SessionActor
from broker.mailbox.running_turn import RunningTurn
from core import turn_events as te
from tests.unit.test_actor import Ports, anyio_backend, at, item, ports_with

pytestmark = pytest.mark.anyio
__all__ = ["anyio_backend"]
WAIT_S = 10.0


async def advance(seconds: float) -> None:
    """Let `seconds` of virtual time pass: the MockClock jumps, nothing really waits."""
    await anyio.sleep(seconds)


def waiting_ports(**sections: dict[str, Any]) -> Ports:
    return ports_with(ledger={"writer_wait_s": WAIT_S}, **sections)


async def test_without_room_turns_begin_only_once_room_comes_one_at_a_time() -> None:
    ports = waiting_ports()
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        await advance(1)  # the actor runs: posts are handled as they come
        ports.make_room(False)
        actor.post(item(1, "first"))
        actor.post(item(2, "second"))
        await advance(2.5 * WAIT_S)  # two whole waits for room pass in vain
        assert at(ports, "running") == [] and ports.engine.calls == []
        ports.make_room()
        await ports.retired.wait()
    opened = 1 + 2.5 * WAIT_S
    running = [(t, d) for t, w, d in ports.log if w == "running"]
    assert [d for _, d in running] == [["i1"], ["i2"]]  # each message once, in order
    assert all(t == pytest.approx(opened) for t, _ in running)
    assert [r.status for r in ports.commits] == ["completed", "completed"]
    # Serial: the second turn began after the first one's commit.
    first_commit, _ = at(ports, "commit")
    assert ports.log.index((running[1][0], "running", ["i2"])) > next(
        n for n, (t, w, _) in enumerate(ports.log) if w == "commit" and t == first_commit
    )


class FillingPorts(Ports):
    """Ports whose queue of writes fills as the second turn opens (its engine is looked
    up), between that turn's opening and its start, with no task switch between."""

    opened = 0

    def engine_for(self, persona: str | None) -> Engine:
        self.opened += 1
        if self.opened == 2:
            self.make_room(False)
        return self.engine


async def test_a_turn_opened_with_room_begins_only_once_its_record_can_be_queued() -> None:
    ports = FillingPorts(waiting_ports().settings)
    ports.engine.script = [1.0, 0.0]
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        actor.post(item(1))
        actor.post(item(2))  # opens, inline, as the first turn's commit is posted
        await advance(1 + WAIT_S + 5)
        assert [d for _, w, d in ports.log if w == "running"] == [["i1"]]
        ports.make_room()
        await ports.retired.wait()
    assert at(ports, "running") == [pytest.approx(0), pytest.approx(1 + WAIT_S + 5)]
    assert [r.status for r in ports.commits] == ["completed", "completed"]


async def test_a_command_that_found_no_room_in_time_is_answered_overloaded_in_its_place() -> None:
    ports = waiting_ports()
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        await advance(1)
        ports.make_room(False)
        actor.post(item(1, "/queue collect"))
        actor.post(item(2, "after it"))
        await advance(WAIT_S + 1)  # the command waited a whole bound
        assert [w for _, w, _ in ports.log] == []  # nothing handled, nothing written
        ports.make_room()
        await ports.retired.wait()
    handled = [(w, d) for _, w, d in ports.log if w in ("command", "overloaded", "running")]
    assert handled == [("overloaded", "/queue collect"), ("running", ["i2"])]


async def test_a_command_that_got_room_within_the_bound_is_applied() -> None:
    ports = waiting_ports()
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        await advance(1)
        ports.make_room(False)
        actor.post(item(1, "/status"))
        await advance(WAIT_S / 2)
        assert at(ports, "command") == []
        ports.make_room()
        await ports.retired.wait()
    assert [(w, d) for _, w, d in ports.log] == [("command", "/status"), ("retired", None)]


async def test_a_progress_save_waits_for_room_and_holds_the_stream_meanwhile() -> None:
    ports = waiting_ports(engine={"progress_save_s": 1.0})
    ports.engine.script = [4.0]  # ten words over four seconds: a delta each 0.4 s
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        actor.post(item(1, " ".join("abcdefghij")))
        await advance(1.1)
        ports.make_room(False)  # the first save is due at the delta of 1.2 s
        await advance(2.0)
        ports.make_room()  # at 3.1 s
        await ports.retired.wait()
    saves = [(round(t, 1), d) for t, w, d in ports.log if w == "saved"]
    assert saves[0] == (3.1, "a b c d ")  # waited for room, then saved
    # The stream waited with it: four seconds of deltas, and 1.9 s held at the save.
    assert at(ports, "commit") == [pytest.approx(4.0 + 1.9)]
    assert ports.commits[0].status == "completed" and ports.commits[0].output.split() == list(
        "abcdefghij"
    )


async def test_a_progress_save_that_finds_no_room_in_time_is_skipped() -> None:
    ports = waiting_ports(engine={"progress_save_s": 1.0})
    ports.engine.script = [4.0]
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        actor.post(item(1, " ".join("abcdefghij")))
        await advance(1.1)
        ports.make_room(False)
        await advance(WAIT_S + 1)
        ports.make_room()
        await ports.retired.wait()
    skipped = [(round(t, 1), d) for t, w, d in ports.log if w == "not saved"]
    assert skipped == [(1.2 + WAIT_S, "a b c d ")]
    assert ports.commits[0].status == "completed"  # the commit holds the whole output


class Written:
    """A write of events, committed at once (the `Committing` the turn keeps)."""

    done = True

    def get(self) -> None:
        return None

    async def wait(self) -> None:
        return None

    async def result(self) -> None:
        return None


def running_turn(
    ports: Ports, write: Callable[[int, list[te.Event]], Written], tg: anyio.abc.TaskGroup
) -> RunningTurn:
    """A running turn whose events go to `write`, waiting for `ports`' room."""
    return RunningTurn(
        "t1", 1, "o1", "dm:a", None, lambda *a: None, write_events=write,
        has_room=ports.has_room, admit=ports.admit, spawn=tg.start_soon,
    )  # fmt: skip


async def test_a_turns_events_wait_for_room_then_are_written() -> None:
    ports = waiting_ports()
    written: list[tuple[float, int, list[str]]] = []

    def write(first: int, events: list[te.Event]) -> Written:
        written.append((anyio.current_time(), first, [kind for kind, _ in events]))
        return Written()

    async with anyio.create_task_group() as tg:
        turn = running_turn(ports, write, tg)
        ports.make_room(False)
        turn.event("action", {"name": "one"})
        turn.event("action", {"name": "two"})
        await advance(3)
        assert written == []  # waiting, not refused
        ports.make_room()
        await anyio.lowlevel.checkpoint()  # the waiting task sends them
        await anyio.wait_all_tasks_blocked()
    ((when, first, kinds),) = written
    assert when == pytest.approx(3.0) and (first, kinds) == (0, ["action", "action"])


async def test_events_that_find_no_room_in_time_go_with_the_next_write() -> None:
    ports = waiting_ports()
    written: list[tuple[int, list[str]]] = []

    def write(first: int, events: list[te.Event]) -> Written:
        written.append((first, [kind for kind, _ in events]))
        return Written()

    async with anyio.create_task_group() as tg:
        turn = running_turn(ports, write, tg)
        ports.make_room(False)
        turn.event("action", {"name": "one"})
        await advance(WAIT_S + 1)  # its wait for room ended in vain
        assert written == [] and not turn.events_follow_up
        ports.make_room()
        turn.event("action", {"name": "two"})
    assert written == [(0, ["action", "action"])]
