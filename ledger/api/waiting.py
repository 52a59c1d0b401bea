"""How a caller waits for the Store's writer thread: asyncio, trio, or a plain thread.

A ticket carries its job and a `post` that runs a function on the caller's side (the
event loop's thread, or the writer thread itself for a blocking caller); the writer
posts once per batch and caller side, not once per job, so many waiting tasks cost
one wake-up of their loop. A ticket is `done` once its caller's side was told
(`on_done` ran there), so a task reads it without a lock; a task that must wait makes
its future before it yields, so no `on_done` can come before it is there. The event
loop is looked up at each call, not kept: one Store serves any number of event loops
one after another and blocking callers at once.

A caller cancelled while it waits does not take its job back: a job handed to the
writer runs and may commit (ledger/writer/group_commit.py), and its result is
dropped. The first task of a pass to hand a job to a writer that gathers on its loop
(engine.py) leads the pass's batch: it lets the loop run the pass's other tasks once,
then commits what they gathered itself; cancelled meanwhile, it commits all the same,
as the batch holds their jobs.
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
        self.loop = loop  # the asyncio loop waiting, for a commit on its thread (engine.py)
        self.on_done = on_done  # runs on the caller's side
        # Set by the writer for the first ticket of a pass: commits the pass's batch.
        self.lead: Callable[[asyncio.AbstractEventLoop], None] | None = None
        # Whether that first task lets the pass run before it commits (engine.py).
        self.gather = True
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = False  # set on the caller's side, just before on_done

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
    """`on_done` of a task's ticket until the task waits for it."""


def _waker(fut: asyncio.Future[None]) -> Callable[[Ticket], None]:
    def done(_: Ticket) -> None:
        if not fut.done():  # a cancelled caller drops the result
            try:  # noqa: SIM105 - free when nothing raises; `suppress` is not, per append
                fut.set_result(None)
            except RuntimeError:  # its loop closed under a leader: nobody waits
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
        lead(loop)  # nothing to gather (engine.py)
    elif lead is not None:
        try:
            await _one_pass()  # the pass's other tasks gather behind this one
        finally:
            lead(loop)
    if not ticket.done:  # not committed on this thread yet
        fut: asyncio.Future[None] = loop.create_future()
        ticket.on_done = _waker(fut)
        await fut
    return ticket.outcome()


def wait_blocking(job: JobSpec, submit: Callable[[Ticket], None]) -> Any:
    """Hand `job` to the writer (or run it here: engine.py) and block this
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
