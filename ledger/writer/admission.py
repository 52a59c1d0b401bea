"""Admission to the ledger writer's bounded queue (ledger/writer/group_commit.py).

A submitter that can wait asks `admit(wait_s)` before it queues a job. While the
queue is under its bound, `admit` returns at once and without yielding, so the
`submit` that follows it (without yielding) is taken; else it waits for the writer
to take a batch from the queue, at most `wait_s`, and then raises `WriterOverloaded`:
a stalled writer is answered `overloaded`, never by a silent drop. The writer's
`has_room` is the same test without the wait, for a submitter that cannot await
where it writes: it writes at once with room, else awaits `admit` first
(broker/mailbox/write_room.py). The event waiters sleep on is made only while someone
waits, so a batch taken with nobody waiting costs one attribute read.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from ledger.port.errors import WriterClosed, WriterOverloaded


class Admission:
    def __init__(self, has_room: Callable[[], bool], closed: Callable[[], bool]) -> None:
        self._has_room = has_room  # the queue is under its bound and the writer takes jobs
        self._closed = closed
        self._room: anyio.Event | None = None  # only while someone waits

    async def admit(self, wait_s: float) -> None:
        """Return once the queue takes another job; WriterOverloaded after
        `wait_s`, WriterClosed once the writer has stopped."""
        if self._has_room():
            return  # no checkpoint: the common case costs the caller no loop turn
        with anyio.move_on_after(wait_s):
            while not self._has_room() and not self._closed():
                if self._room is None:
                    self._room = anyio.Event()
                await self._room.wait()
        if self._closed():
            raise WriterClosed("the ledger writer has stopped")
        if not self._has_room():
            raise WriterOverloaded(f"the ledger writer queue stayed full for {wait_s:g} s")

    def made_room(self) -> None:
        """The writer took jobs from its queue, or stopped: waiters look again."""
        if self._room is not None:
            self._room.set()
            self._room = None
