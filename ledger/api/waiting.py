"""How a caller waits for the Store's writer thread: asyncio, trio, or a plain thread.

Rule 1: a ticket carries its job and a `post` that runs a function on the
        caller's side (the event loop's thread, or the writer thread itself for a
        blocking caller); the writer posts once per batch and caller side, not
        once per job, so 200 waiting tasks cost one wake-up of their loop.
Rule 2: a caller cancelled while it waits does not take its job back: a job
        handed to the writer runs and may commit (ledger/writer/group_commit.py Rule 4). Its
        result is dropped.
Rule 3: the event loop is looked up at each call, not kept: one Store serves
        any number of event loops one after another (an `asyncio.run` per
        request, a test per loop) and blocking callers at once.
Rule 4: the first task of a pass to hand a job to a writer that gathers on its
        loop (engine.py Rule 6) leads the pass's batch: it lets the loop run the
        pass's other tasks once, then commits what they gathered itself. A
        callback for the commit and a wake-up after it cost a sequential caller
        a second pass of the loop per append. Cancelled while it lets the
        others run, it commits all the same: the batch holds their jobs (and
        so when its loop closed without resuming it, and the batch's callers
        are gone with that loop).
Rule 5: a ticket is `done` once its caller's side was told (`on_done` ran
        there: the event loop's thread for a task), so a task reads it without
        a lock. A first task whose batch committed on its own thread finds its
        ticket done when the commit returns and makes no future to wait on; a
        task that must wait makes its future then, before it yields, so no
        `on_done` can come before it is there.
"""

from __future__ import annotations

import asyncio
import threading
import types
from collections.abc import Callable, Generator
from typing import Any

from ledger.writer.jobs import JobSpec

Post = Callable[[Callable[[], None]], object]


class Ticket:
    __slots__ = ("done", "error", "gather", "job", "lead", "loop", "on_done", "post", "value")

    def __init__(
        self,
        job: JobSpec,
        post: Post,
        on_done: Callable[[Ticket], None],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.job = job
        self.post = post
        self.loop = loop  # the asyncio loop waiting, for a commit on its thread (engine.py Rule 6)
        self.on_done = on_done  # runs on the caller's side (Rule 1)
        # Set by the writer for the first ticket of a pass: commits the pass's batch (Rule 4).
        self.lead: Callable[[asyncio.AbstractEventLoop], None] | None = None
        # Whether that first task lets the pass run before it commits (engine.py Rule 6a).
        self.gather = True
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = False  # set on the caller's side, just before on_done (Rule 5)

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def run_now(fn: Callable[[], None]) -> None:
    fn()


@types.coroutine
def _one_pass() -> Generator[None, None, None]:
    """What `asyncio.sleep(0)` awaits, without the coroutine around it: a bare yield,
    which puts the task back at the end of the loop's ready tasks."""
    yield


def _unset(_: Ticket) -> None:
    """`on_done` of a task's ticket until the task waits for it (Rule 5)."""


def _waker(fut: asyncio.Future[None]) -> Callable[[Ticket], None]:
    def done(_: Ticket) -> None:
        if not fut.done():  # Rule 2
            try:  # noqa: SIM105 - free when nothing raises; `suppress` is not, per append
                fut.set_result(None)
            except RuntimeError:  # its loop closed under a leader (Rule 4): nobody waits
                pass

    return done


async def _wait_trio(job: JobSpec, submit: Callable[[Ticket], None]) -> Any:
    import trio

    token = trio.lowlevel.current_trio_token()
    event = trio.Event()
    ticket = Ticket(job, token.run_sync_soon, lambda _: event.set())
    submit(ticket)
    await event.wait()
    return ticket.outcome()


async def wait_async(job: JobSpec, submit: Callable[[Ticket], None]) -> Any:
    """Hand `job` to the writer and wait for its commit on this task's event loop."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return await _wait_trio(job, submit)
    ticket = Ticket(job, loop.call_soon_threadsafe, _unset, loop)
    submit(ticket)
    lead = ticket.lead
    if lead is not None and not ticket.gather:
        lead(loop)  # nothing to gather (engine.py Rule 6a)
    elif lead is not None:
        try:
            await _one_pass()  # the pass's other tasks gather behind this one (Rule 4)
        finally:
            lead(loop)
    if not ticket.done:  # Rule 5: not committed on this thread yet
        fut: asyncio.Future[None] = loop.create_future()
        ticket.on_done = _waker(fut)
        await fut
    return ticket.outcome()


def wait_blocking(job: JobSpec, submit: Callable[[Ticket], None]) -> Any:
    """Hand `job` to the writer (or run it here: engine.py Rule 6) and block this
    thread until its commit."""
    done = threading.Event()
    ticket = Ticket(job, run_now, lambda _: done.set())
    submit(ticket)
    done.wait()
    return ticket.outcome()


def current_loop() -> object:
    """This task's event loop (asyncio) or run (trio), to tell one from the next."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        import trio

        return trio.lowlevel.current_trio_token()
