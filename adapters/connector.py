"""The adapter SDK's connection to the broker, kept up for `adapters.sdk.Adapter`.

It connects and says hello, reconnects with backoff, owns the one task that
writes, and keeps every inbound frame until the broker answers it. The frames
it reads that are not answers (replies) go to `on_reply`.

A message is kept until the broker answers it: after a reconnect every kept message
is written again, with the same msg_id and req, before anything new, and the broker
dedups by (channel, msg_id), answering a resend of a committed message with
`duplicate: true`. There is one connection at a time, and its writer task alone writes
to the socket; callers hand it whole frames, so a cancelled caller never leaves half a
frame on the wire.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from adapters.types import BrokerUnreachable, HandshakeRefused, MessageRejected, Tuning
from plumbing.ids import new_id
from wire.client import BrokerClient, BrokerError
from wire.framing import FrameTooLarge

log = logging.getLogger("adapters.sdk")  # the SDK's one logger: users configure it by name

FATAL_CODES = frozenset({"unauthorized", "bad_hello", "unsupported_version"})
_LINK_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError)
_STREAM_ERRORS = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    ConnectionError,
    FrameTooLarge,
)
Outgoing = bytes | anyio.Event  # an Event is a flush marker, set once written


class _Pending:
    """An inbound frame waiting for its answer (an `ack` or an `error`)."""

    __slots__ = ("answer", "data", "done")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.done = anyio.Event()
        self.answer: dict[str, Any] = {}


class _Link:
    """One live connection: the client and its writer's mailbox."""

    def __init__(self, client: BrokerClient, outbox: MemoryObjectSendStream[Outgoing]) -> None:
        self.client = client
        self.outbox = outbox
        self.ready = False  # True once the kept messages are queued ahead of new ones


class Connector:
    """Keeps one adapter connected to the broker (see the module's rules)."""

    def __init__(
        self,
        path: Path,
        channel: str,
        token: str | None,
        tuning: Tuning,
        on_reply: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        self.path = path
        self.channel = channel
        self.token = token
        self.tuning = tuning
        self.welcome: dict[str, Any] = {}
        self.connects = 0  # successful handshakes so far
        self._on_reply = on_reply
        self._pending: dict[str, _Pending] = {}  # by req, in send order
        self._link: _Link | None = None
        self._up = anyio.Event()

    @property
    def connected(self) -> bool:
        return self._link is not None and self._link.ready

    async def wait_connected(self) -> None:
        """Until a connection is up (the caller bounds the wait)."""
        await self._up.wait()

    # -- connecting --------------------------------------------------------------

    async def supervise(
        self,
        require_first: bool,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Connect, serve, and reconnect with backoff, forever."""
        first = require_first
        if not require_first:
            task_status.started()
        attempt = 0
        while True:
            client = await self._open(first)
            if client is not None:
                if first:
                    task_status.started()
                    first = False
                lived = await self._serve(client)
                attempt = 0 if lived >= self.tuning.stable_s else attempt + 1
            else:
                attempt += 1
            # Bounded by tuning.reconnect.maximum (jittered).
            await anyio.sleep(self.tuning.reconnect.delay(max(attempt - 1, 0), random.random()))

    async def _open(self, first: bool) -> BrokerClient | None:
        """A connected client after the handshake, or None to try again later."""
        try:
            with anyio.fail_after(self.tuning.connect_timeout):
                return await BrokerClient.connect(
                    self.path, role="adapter", channel=self.channel, token=self.token
                )
        except BrokerError as exc:
            if exc.code in FATAL_CODES:
                raise HandshakeRefused.from_frame(exc.frame) from exc
            error: Exception = exc
        except (OSError, *_STREAM_ERRORS) as exc:  # TimeoutError is an OSError
            error = exc
        if first:
            raise BrokerUnreachable(
                "unreachable", f"cannot reach the broker at {self.path}: {error}"
            ) from error
        log.debug("connect failed: %s", error)
        return None

    async def _serve(self, client: BrokerClient) -> float:
        """Run one connection until it drops; how long it lived, in seconds."""
        began = anyio.current_time()
        send, receive = anyio.create_memory_object_stream[Outgoing](self.tuning.outbox_size)
        link = _Link(client, send)
        self._link = link
        self.welcome = client.welcome
        self.connects += 1
        try:
            async with client, send, anyio.create_task_group() as tg:
                tg.start_soon(self._writer, link, receive, tg.cancel_scope)
                await self._reader(client)
                tg.cancel_scope.cancel()
        finally:
            self._link = None
            # A flush marker queued after the writer stopped would otherwise be
            # waited on until close_timeout; there is nothing left to flush.
            for item in _take_ready(receive):
                if isinstance(item, anyio.Event):
                    item.set()
            receive.close()
            if self._up.is_set():
                self._up = anyio.Event()
        log.info("connection to the broker lost; %d messages kept", len(self._pending))
        return anyio.current_time() - began

    # -- the connection's two tasks ------------------------------------------------

    async def _writer(
        self,
        link: _Link,
        receive: MemoryObjectReceiveStream[Outgoing],
        scope: anyio.CancelScope,
    ) -> None:
        try:
            # the kept messages go first. Taking them and becoming ready
            # happen with no await between, so a message is either in this
            # backlog or queued after it by its sender, never both, never neither.
            backlog = b"".join(p.data for p in self._pending.values())
            link.ready = True
            self._up.set()
            if backlog:
                await self._write(link.client, backlog)
            async for item in receive:
                await self._write_batch(link.client, [item, *_take_ready(receive)])
        except (*_LINK_GONE, ConnectionError, TimeoutError) as exc:
            log.debug("writer stopped: %r", exc)
            scope.cancel()

    async def _write_batch(self, client: BrokerClient, items: list[Outgoing]) -> None:
        data = b"".join(i for i in items if isinstance(i, bytes))
        if data:
            await self._write(client, data)
        for item in items:
            if isinstance(item, anyio.Event):
                item.set()

    async def _write(self, client: BrokerClient, data: bytes) -> None:
        with anyio.fail_after(self.tuning.write_timeout):
            await client.send_raw(data)

    async def _reader(self, client: BrokerClient) -> None:
        """Until the connection ends (an idle connection is normal: no timeout)."""
        try:
            while True:
                try:
                    frame = await client.recv()
                except orjson.JSONDecodeError:
                    log.warning("the broker sent a line that is not JSON; skipped")
                    continue
                await self._dispatch(frame)
        except _STREAM_ERRORS:
            return

    async def _dispatch(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind in ("ack", "error"):
            self._answer(frame)
        else:
            await self._on_reply(frame)

    def _answer(self, frame: dict[str, Any]) -> None:
        req = frame.get("req")
        pending = self._pending.pop(req, None) if isinstance(req, str) else None
        if pending is None:
            if frame.get("type") == "error":
                log.warning("broker error: %s: %s", frame.get("code"), frame.get("message"))
            return
        pending.answer = frame
        pending.done.set()

    # -- sending -----------------------------------------------------------------------

    async def roundtrip(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        req = new_id()
        data = orjson.dumps({**fields, "type": "inbound", "req": req}) + b"\n"
        if len(data) - 1 > self.tuning.max_frame_bytes:
            # The broker would close the connection, and the resend would loop.
            raise MessageRejected(
                "frame_too_large",
                f"the frame is longer than {self.tuning.max_frame_bytes} bytes",
                "text",
            )
        pending = _Pending(data)
        self._pending[req] = pending
        try:
            link = self._link
            if link is not None and link.ready:
                with contextlib.suppress(*_LINK_GONE):  # kept: the next link resends it
                    await link.outbox.send(data)
            await pending.done.wait()  # unbounded by design: see send_inbound
        finally:
            self._pending.pop(req, None)
        return pending.answer

    async def post(self, data: bytes) -> None:
        # Not gated on `ready`: a confirmation may be queued before the writer
        # has taken the backlog (a resend can arrive in the welcome's read),
        # and it may go out after the backlog as well as before.
        link = self._link
        if link is None:
            return
        with contextlib.suppress(*_LINK_GONE):
            await link.outbox.send(data)

    async def flush(self) -> None:
        """Let the writer send what is queued (confirmations), within close_timeout."""
        link = self._link
        if link is None:  # as in post: confirmations may be queued before `ready`
            return
        marker = anyio.Event()
        with anyio.move_on_after(self.tuning.close_timeout, shield=True):
            try:
                await link.outbox.send(marker)
            except _LINK_GONE:
                return
            await marker.wait()


def _take_ready(receive: MemoryObjectReceiveStream[Outgoing]) -> list[Outgoing]:
    """What else is already queued, without waiting (written in one go)."""
    out: list[Outgoing] = []
    while True:
        try:
            out.append(receive.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream):
            return out
