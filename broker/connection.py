"""One client connection of the server: what the broker writes to it.

`post` is the hot path: the acks of a committed batch and a turn's deltas and
reply go through it. Accepting a connection, its handshake and reading its
frames are broker/server.py's; splitting its bytes into frames is
wire/reader.py's.
"""

from __future__ import annotations

import socket
from typing import Any

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from plumbing import logs
from plumbing.rawsock import running_asyncio_loop
from wire.framing import ProtocolError, encode

log = logs.get("broker.connection")
SEND_TIMEOUT_S = 30.0

OUT_SOFT_LIMIT = 4 << 20  # past this, best-effort frames (deltas) are dropped
OUT_HARD_LIMIT = 64 << 20  # past this, the client is too slow and is disconnected


class Connection:
    """One client connection.

    `send` writes and waits; `post` writes without waiting, so an actor never
    waits on a slow client. Each keeps the order in which it was called.

    On asyncio, what is posted during one turn of the event loop leaves in one write
    at the end of it: the acks of a committed batch, or a turn's delta, reply and the
    next ack, cost one system call, not one each; on trio a post is written at once.
    What the socket does not take at once waits for the connection's flusher task,
    and everything posted or sent later waits behind it: a frame is never split by
    another's bytes.
    """

    def __init__(self, stream: anyio.abc.SocketStream, conn_id: str) -> None:
        self.stream = stream
        self.id = conn_id
        self.role: str | None = None
        self.channel: str | None = None
        self.uid: int | None = None  # the peer's uid (SO_PEERCRED): its operator role
        self._send_lock = anyio.Lock()
        self.closed = False
        self.tg: anyio.abc.TaskGroup | None = None  # the connection's own tasks
        self.frame_bytes = 0  # of the frame being handled, its newline aside
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._out_ready = anyio.Event()
        self._flushed = anyio.Event()
        self._flush_waiters = 0
        self._sending = False
        self._write_scheduled = False
        raw: socket.socket = stream.extra(SocketAttribute.raw_socket)
        # Direct writes need a non-blocking socket (both backends make it one).
        self._raw: socket.socket | None = None if raw.getblocking() else raw
        self._loop = running_asyncio_loop()

    def post(self, data: bytes, *, droppable: bool = False) -> bool:
        """Queue bytes to send; False if dropped (best effort) or the client is known gone."""
        if self.closed:
            return False
        if droppable and self._out_bytes > OUT_SOFT_LIMIT:
            return False
        if self._out_bytes > OUT_HARD_LIMIT:
            log.warning("client too slow, disconnecting", conn=self.id, channel=self.channel)
            self._lose()
            return False
        self._out.append(data)
        self._out_bytes += len(data)
        if self._raw is None or self._backlogged:
            self._out_ready.set()  # the flusher writes it, after what it is writing
        elif self._loop is None:
            self._write_out()
        elif not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._write_out)
        return not self.closed

    @property
    def _backlogged(self) -> bool:
        """The flusher holds or is writing data: what is posted now goes behind it."""
        return self._sending or self._out_ready.is_set() or self._send_lock.locked()

    def _write_out(self) -> None:
        """Write what waits directly; what the socket does not take goes to the flusher."""
        self._write_scheduled = False
        if self.closed or not self._out:
            return
        if self._backlogged:
            self._out_ready.set()
            return
        assert self._raw is not None
        out = self._out
        data = out[0] if len(out) == 1 else b"".join(out)
        try:
            sent = self._raw.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._lose()
            return
        out.clear()
        if sent == len(data):
            self._out_bytes = 0
            if self._flush_waiters:
                self._release_flush_waiters()
            return
        out.append(data[sent:])
        self._out_bytes = len(data) - sent
        self._out_ready.set()  # the socket is full: the flusher waits for it to drain

    def _lose(self) -> None:
        self.closed = True
        if self._flush_waiters:
            self._release_flush_waiters()
        if self.tg is not None:
            self.tg.cancel_scope.cancel()

    def _release_flush_waiters(self) -> None:
        self._flushed.set()
        self._flushed = anyio.Event()

    async def flush_forever(self) -> None:
        while True:
            await self._out_ready.wait()
            # What waits is taken only under the lock: it may begin with the rest of a
            # frame the socket took part of, which nothing may be written before.
            async with self._send_lock:
                self._out_ready = anyio.Event()
                await self._write_waiting(b"")
            if not self._out:
                self._release_flush_waiters()

    async def flushed(self) -> None:
        """Return once everything posted so far has been written (or the client is gone)."""
        self._flush_waiters += 1
        try:
            while (self._out or self._sending) and not self.closed:
                await self._flushed.wait()
        finally:
            self._flush_waiters -= 1

    async def send(self, frame: dict[str, Any]) -> None:
        await self.send_raw(encode(frame))

    async def send_raw(self, data: bytes) -> None:
        """Write `data` after everything posted before it, and wait until it is written."""
        async with self._send_lock:
            await self._write_waiting(data)
        if not self._out and self._flush_waiters:
            self._release_flush_waiters()

    async def _write_waiting(self, data: bytes) -> None:
        """Under the lock: what was posted and waits, then `data`, in one write."""
        if self._out:
            data, self._out, self._out_bytes = b"".join([*self._out, data]), [], 0
        if not data:
            return
        self._sending = True
        try:
            with anyio.fail_after(SEND_TIMEOUT_S):
                await self.stream.send(data)
        finally:
            self._sending = False

    async def send_error(self, err: ProtocolError) -> None:
        await self.send(err.frame())
