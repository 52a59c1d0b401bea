"""Reading and writing non-blocking sockets on the hot paths, for less than anyio's streams cost.

On asyncio, anyio's socket stream yields to the loop on every receive and send, and
registers and unregisters the socket with the loop's poller around every wait; at
thousands of small frames a second that costs more than handling the frames
(docs/performance.md). Here, on asyncio, a socket stays registered while it is read:
a callback collects what arrives and the reading task wakes once for all of it. On
trio the reader waits with `anyio.wait_readable`, which trio does cheaply.

One task reads a `SocketReader`, and `close()` is called before the socket closes.
At most `high_water` bytes wait unread: past that the reader stops taking bytes off
the socket until the task has read what waits, so a peer that sends faster than it
is served is held back by the kernel's buffers. `receive` waits only when nothing is
buffered; on asyncio that is also its only yield (bytes arrive only while the loop
polls, so a task that drains its reader yields once per batch of arrivals), and on
trio it checks for cancellation on every call, as trio's own sockets do.
"""

from __future__ import annotations

import asyncio
import socket

import anyio
import anyio.lowlevel

# One recv. Not larger: CPython allocates the whole size for every recv, and
# past glibc's mmap threshold (128 KiB) that costs a map and an unmap each time
# (docs/performance.md).
CHUNK = 64 * 1024
HIGH_WATER = 1 << 20


def running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: trio
        return None


class SocketReader:
    """Bytes from a non-blocking socket, as they come (see the rules above)."""

    def __init__(self, sock: socket.socket, *, high_water: int = HIGH_WATER) -> None:
        if sock.getblocking():
            raise ValueError("SocketReader needs a non-blocking socket")
        self._sock = sock
        self._high_water = high_water
        self._chunks: list[bytes] = []
        self._held = 0
        self._eof = False
        self._error: OSError | None = None
        self._closed = False
        self._waiter: asyncio.Future[None] | None = None
        self._watching = False
        self._loop = running_asyncio_loop()
        if self._loop is not None:
            self._watch()

    def close(self) -> None:
        """Stop reading and drop what waits unread (the socket itself stays open). Idempotent."""
        self._closed = True
        self._unwatch()
        self._chunks.clear()  # up to `high_water` bytes nobody will read now
        self._held = 0
        self._wake()

    async def receive(self) -> bytes:
        """Whatever has arrived, at least one byte.

        Raises EndOfStream when the peer closed its side, BrokenResourceError
        when the socket failed, and ClosedResourceError after `close()`.
        """
        if self._loop is None:
            return await self._receive_polling()
        while not self._chunks:
            self._raise_if_done()
            if self._waiter is not None:  # one task reads
                raise anyio.BusyResourceError("reading from")
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._held = 0
        self._watch()  # resumes reading if `high_water` had paused it
        return data

    # -- asyncio: a callback collects, the task takes --------------------------

    def _watch(self) -> None:
        if self._watching or self._eof or self._error is not None or self._closed:
            return
        assert self._loop is not None
        self._loop.add_reader(self._sock.fileno(), self._readable)
        self._watching = True

    def _unwatch(self) -> None:
        if self._watching:
            assert self._loop is not None
            self._watching = False
            self._loop.remove_reader(self._sock.fileno())

    def _readable(self) -> None:
        while True:
            try:
                data = self._sock.recv(CHUNK)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._error = exc
                self._unwatch()
                break
            if not data:
                self._eof = True
                self._unwatch()
                break
            self._chunks.append(data)
            self._held += len(data)
            if self._held >= self._high_water:
                self._unwatch()
                break
            if len(data) < CHUNK:
                break  # the socket is empty (most likely): no need to ask again
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _raise_if_done(self) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if self._error is not None:
            raise anyio.BrokenResourceError(str(self._error)) from self._error
        if self._eof:
            raise anyio.EndOfStream

    # -- trio (and anything else): read when readable --------------------------

    async def _receive_polling(self) -> bytes:
        await anyio.lowlevel.checkpoint()
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                data = self._sock.recv(CHUNK)
            except (BlockingIOError, InterruptedError):
                await anyio.wait_readable(self._sock)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError(str(exc)) from exc
            if not data:
                raise anyio.EndOfStream
            return data


async def send_all(sock: socket.socket, *parts: bytes) -> None:
    """Write all of `parts`, in order, to a non-blocking socket, waiting only when it is full.

    Unlike anyio's `send` it does not yield when the socket takes the bytes at
    once; the caller's task yields elsewhere. Raises BrokenResourceError. The
    parts go out by scatter/gather (`sendmsg`): a header and a large payload
    are never joined into a third copy.

    All or nothing under cancellation: cancelled before its first byte is
    written it sends nothing; after that the rest follows, shielded, since half
    a frame would put the peer's framing out of step for good.
    """
    views = [memoryview(part) for part in parts if part]
    started = False
    while views:
        try:
            sent = sock.sendmsg(views)
        except (BlockingIOError, InterruptedError):
            with anyio.CancelScope(shield=started):
                await anyio.wait_writable(sock)
            continue
        except OSError as exc:
            raise anyio.BrokenResourceError(str(exc)) from exc
        started = started or sent > 0
        while sent and sent >= len(views[0]):
            sent -= len(views.pop(0))
        if sent:
            views[0] = views[0][sent:]
