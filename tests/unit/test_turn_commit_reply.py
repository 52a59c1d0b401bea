"""A turn's reply leaves once its commit is reported (TurnCommits.commit).

The writer reports a commit by resolving the job's `Pending`, and nothing more:
the reply is handed to Deliveries by the turn's own task when it resumes, before
the commit returns to the actor, and only for the write that committed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import anyio
import pytest

from broker.deliveries import Deliveries
from broker.mailbox.turn_commit import TurnCommits, Written
from ledger import turns as lt
from ledger.port.errors import HeadMoved, LedgerWriteFailed, WriterClosed, WriterOverloaded
from ledger.port.protocols import TurnPort
from ledger.port.records import TurnRecord
from ledger.writer.jobs import JobSpec, Pending

pytestmark = pytest.mark.anyio


class FakeWriter:
    """Jobs are queued; the test resolves them, as the writer's receiver would."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, Pending[Any]]] = []
        self.batch_done = anyio.Event()
        self.arrived = anyio.Event()
        self.refusals: list[Exception] = []
        self.admits_refused = 0

    def _submit(self, fn: Any, *args: Any) -> Pending[Any]:
        pending: Pending[Any] = Pending(JobSpec(fn, args, {}), lambda: self.batch_done)
        self.jobs.append((fn.__name__, pending))
        self.arrived.set()
        return pending

    async def admit(self) -> None:
        # Room, unless the test says the queue stays full for some bounds.
        if self.refusals:
            error = self.refusals.pop(0)
            self.admits_refused += 1
            raise error

    def submit_turn(self, rec: TurnRecord) -> Pending[Any]:
        return self._submit(lt.commit_turn, rec)

    def submit_orphan(self, rec: TurnRecord) -> Pending[Any]:
        return self._submit(lt.commit_orphan, rec)

    async def next_job(self) -> tuple[str, Pending[Any]]:
        with anyio.fail_after(5):
            while not self.jobs:
                self.arrived = anyio.Event()
                await self.arrived.wait()
        return self.jobs.pop(0)

    def resolve(self, pending: Pending[Any], value: Any, error: BaseException | None) -> None:
        pending._resolve(value, error)
        self.batch_done.set()
        self.batch_done = anyio.Event()


class Spy:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def expect(self, out_id: str) -> None:
        self.log.append(f"expect {out_id}")

    def abandon(self, out_id: str) -> None:
        self.log.append(f"abandon {out_id}")

    def deliver(self, out_id: str, channel: str, session: str, frame: str) -> None:
        self.log.append(f"deliver {out_id} {channel} {session} {frame}")


def record() -> TurnRecord:
    return TurnRecord(
        turn_id="t1",
        session="dm:someone",
        parent_id=None,
        type="turn",
        status="completed",
        reason=None,
        error=None,
        output="hi",
        engine="echo",
        model=None,
        started_at=1,
        completed_at=2,
        prompt_tokens=None,
        completion_tokens=None,
        inputs=[],
        item_status="done",
        outbox=("out-1", "chat", '{"type":"deliver"}'),
    )


def commits(writer: FakeWriter, log: list[str]) -> TurnCommits:
    return TurnCommits(cast(TurnPort, writer), cast(Deliveries, Spy(log)), lambda item: None)


async def commit_with(
    writer_side: Callable[[FakeWriter, list[str]], Awaitable[None]],
    refusals: list[Exception] | None = None,
) -> tuple[list[str], list[Written]]:
    """Run a turn's commit while `writer_side` plays the writer; the log of what
    Deliveries was told (and when the actor resumed), and what the commit returned."""
    writer, log, written = FakeWriter(), list[str](), list[Written]()
    writer.refusals = list(refusals or [])
    boxes = commits(writer, log)

    async def actor() -> None:
        written.append(await boxes.commit(record()))
        log.append("actor resumed")

    async with anyio.create_task_group() as tg:
        tg.start_soon(actor)
        await writer_side(writer, log)
    return log, written


async def test_the_reply_leaves_when_the_commit_is_reported() -> None:
    async def writer_side(writer: FakeWriter, log: list[str]) -> None:
        name, pending = await writer.next_job()
        assert name == "commit_turn" and log == ["expect out-1"]
        writer.resolve(pending, [], None)
        # The writer's resolution runs no code of the shell: nothing is sent yet.
        assert log == ["expect out-1"]

    log, written = await commit_with(writer_side)
    assert log == [
        "expect out-1",
        'deliver out-1 chat dm:someone {"type":"deliver"}',
        "actor resumed",
    ]
    assert written == ["thread"]


async def test_a_turn_that_lost_its_head_replies_once_from_the_orphan_commit() -> None:
    async def writer_side(writer: FakeWriter, log: list[str]) -> None:
        _, pending = await writer.next_job()
        writer.resolve(pending, None, HeadMoved("moved"))
        assert log == ["expect out-1"]
        name, pending = await writer.next_job()
        assert name == lt.commit_orphan.__name__
        writer.resolve(pending, [], None)

    log, written = await commit_with(writer_side)
    assert written == ["orphan"] and sum(e.startswith("deliver") for e in log) == 1


async def test_a_failed_commit_sends_nothing_and_gives_the_reply_up() -> None:
    async def writer_side(writer: FakeWriter, log: list[str]) -> None:
        _, pending = await writer.next_job()
        writer.resolve(pending, None, LedgerWriteFailed("disk full"))

    log, written = await commit_with(writer_side)
    assert written == ["lost"]
    assert log == ["expect out-1", "abandon out-1", "actor resumed"]


async def test_a_commit_that_finds_no_room_for_a_while_waits_again_and_commits() -> None:
    """A full queue for three bounds does not cost the turn its record (it
    used to: its items stayed running until the next start)."""

    async def writer_side(writer: FakeWriter, log: list[str]) -> None:
        name, pending = await writer.next_job()
        assert name == "commit_turn" and writer.admits_refused == 3
        writer.resolve(pending, [], None)

    full: list[Exception] = [WriterOverloaded("the ledger writer queue stayed full for 10 s")] * 3
    log, written = await commit_with(writer_side, full)
    assert written == ["thread"]
    assert log == [
        "expect out-1",
        'deliver out-1 chat dm:someone {"type":"deliver"}',
        "actor resumed",
    ]


async def test_a_commit_waiting_for_room_when_the_writer_stops_is_given_up() -> None:
    async def writer_side(writer: FakeWriter, log: list[str]) -> None:
        return  # no job comes: the writer stopped before it took one

    stopped: list[Exception] = [
        WriterOverloaded("full"),
        WriterClosed("the ledger writer has stopped"),
    ]
    log, written = await commit_with(writer_side, stopped)
    assert written == ["lost"]
    assert log == ["expect out-1", "abandon out-1", "actor resumed"]
