"""The adapter SDK: one channel adapter's connection to the broker.

    async with Adapter.connect("/run/broker.sock", "sms", token=token) as adapter:
        ack = await adapter.send("sms-1", "+15550001", "hello")
        async for reply in adapter.replies():
            if isinstance(reply, Deliver):
                ...  # carry it out
                await adapter.confirm(reply.out_id)

Works under asyncio and trio (anyio). docs/adapters.md has a complete example.

Rule 1: a message is kept until the broker answers it. After a reconnect every
        kept message is written again, with the same msg_id and req, before
        anything new; the broker dedups by (channel, msg_id) and answers a
        resend of a committed message with `duplicate: true`.
Rule 2: one connection at a time; its writer task alone writes to the socket.
        Callers hand it whole frames, so a cancelled caller never leaves half
        a frame on the wire.
Rule 3: a `deliver` is handed out once per out_id. A repeat of one already
        confirmed is confirmed again (the broker never recorded the first
        `delivered`) and not handed out; a repeat of one not yet confirmed is
        dropped (the consumer still holds it).
Rule 4: every task lives in the adapter's task group; leaving `async with`
        ends them all, after a bounded flush of what was queued to write.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from broker.client import BrokerClient, BrokerError
from broker.protocol import FrameTooLarge
from ledger.ids import new_id

from .types import (
    Ack,
    AdapterError,
    Backoff,
    BrokerUnreachable,
    Deliver,
    Delta,
    HandshakeRefused,
    MessageRejected,
    Reply,
    Tuning,
)

__all__ = [
    "Ack",
    "Adapter",
    "AdapterError",
    "Backoff",
    "BrokerUnreachable",
    "Deliver",
    "Delta",
    "HandshakeRefused",
    "MessageRejected",
    "Reply",
    "Tuning",
]

log = logging.getLogger("adapters.sdk")

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


class Adapter:
    """A channel adapter's connection; make one with `Adapter.connect`."""

    def __init__(
        self,
        path: Path | str,
        channel: str,
        token: str | None,
        *,
        auto_confirm: bool,
        replies_buffer: int,
        tuning: Tuning,
    ) -> None:
        self.path = Path(path)
        self.channel = channel
        self.token = token
        self.auto_confirm = auto_confirm
        self.tuning = tuning
        self.welcome: dict[str, Any] = {}
        self.connects = 0  # successful handshakes so far
        self.dropped_deltas = 0  # deltas dropped because the replies buffer was full
        self.overloaded = 0  # `overloaded` answers retried
        self._pending: dict[str, _Pending] = {}  # by req, in send order
        self._seen: OrderedDict[str, bool] = OrderedDict()  # out_id -> confirmed
        self._link: _Link | None = None
        self._up = anyio.Event()
        self._replies_in, self._replies_out = anyio.create_memory_object_stream[Reply](
            replies_buffer
        )

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        path: Path | str,
        channel: str,
        token: str | None = None,
        *,
        auto_confirm: bool = False,
        replies_buffer: int = 64,
        require_first: bool = True,
        tuning: Tuning | None = None,
    ) -> AsyncIterator[Adapter]:
        """Connect and keep connected until the block ends.

        With `require_first` (the default) the first connection must succeed:
        `BrokerUnreachable` or `HandshakeRefused` is raised at once. Without
        it the adapter starts disconnected and keeps trying in the background.
        A refused handshake later on (say, a changed token) ends the block with
        `HandshakeRefused`; a dropped connection is retried with backoff.
        The first attempt is bounded by `tuning.connect_timeout`.
        """
        adapter = cls(
            path,
            channel,
            token,
            auto_confirm=auto_confirm,
            replies_buffer=replies_buffer,
            tuning=tuning or Tuning(),
        )
        with _single_errors(), adapter._replies_in, adapter._replies_out:
            async with anyio.create_task_group() as tg:
                await tg.start(adapter._supervise, require_first)
                try:
                    yield adapter
                finally:
                    await adapter._flush()
                    adapter._replies_in.close()  # consumers elsewhere see the end
                    tg.cancel_scope.cancel()

    # -- the public surface ------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._link is not None and self._link.ready

    async def wait_connected(self) -> None:
        """Until a connection is up (the caller bounds the wait)."""
        await self._up.wait()

    async def send(
        self,
        msg_id: str,
        sender_id: str,
        text: str,
        peer_kind: str = "dm",
        peer_id: str | None = None,
        thread_id: str | None = None,
        sender_name: str | None = None,
        queue_mode: str | None = None,
        meta: Mapping[str, Any] | None = None,
        ts: str | None = None,
    ) -> Ack:
        """Send one inbound message; return once the broker committed it.

        See `send_inbound` for what is retried and what raises.
        """
        fields: dict[str, Any] = {
            "msg_id": msg_id,
            "sender_id": sender_id,
            "text": text,
            "peer_kind": peer_kind,
            "peer_id": peer_id,
            "thread_id": thread_id,
            "sender_name": sender_name,
            "queue_mode": queue_mode,
            "meta": dict(meta) if meta is not None else None,
            "ts": ts,
        }
        return await self.send_inbound({k: v for k, v in fields.items() if v is not None})

    async def send_inbound(self, fields: Mapping[str, Any]) -> Ack:
        """Send the fields of an `inbound` frame as they are (the broker validates them).

        Waits while disconnected and resends after a reconnect (the ack may
        then say `duplicate`); on `overloaded` waits with backoff and tries
        again. Any other error raises `MessageRejected`. There is no timeout
        here: the caller bounds the wait (`anyio.fail_after`). If the caller
        gives up, the broker may still commit the message; sending it again
        with the same msg_id is safe.
        """
        attempt = 0
        while True:
            answer = await self._roundtrip(fields)
            if answer.get("type") == "ack":
                return Ack.from_frame(answer)
            if answer.get("code") != "overloaded":
                raise MessageRejected.from_frame(answer)
            self.overloaded += 1
            await anyio.sleep(self.tuning.overload.delay(attempt, random.random()))
            attempt += 1

    def replies(self) -> AsyncIterator[Reply]:
        """`Delta` and `Deliver` objects as they arrive, until the adapter closes.

        The buffer is bounded: a full buffer drops deltas (they are best
        effort) and holds up reading the connection at a `deliver`, acks
        included. So consume replies in a task of their own, not in the task
        that awaits `send`.
        """
        return _Replies(self)

    async def confirm(self, out_id: str) -> None:
        """Tell the broker a reply was carried out (`delivered`).

        Queued for the writer; when disconnected it is not queued: the broker
        sends the reply again on reconnect and the repeat is confirmed then.
        """
        self._remember(out_id, confirmed=True)
        await self._post(orjson.dumps({"type": "delivered", "out_id": out_id}) + b"\n")

    # -- connecting --------------------------------------------------------------

    async def _supervise(
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
            # Rule 1: the kept messages go first. Taking them and becoming ready
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
        elif kind == "delta":
            self._offer_delta(frame)
        elif kind == "deliver":
            await self._offer_deliver(frame)
        # Other frame types are ignored: the protocol may grow.

    def _answer(self, frame: dict[str, Any]) -> None:
        req = frame.get("req")
        pending = self._pending.pop(req, None) if isinstance(req, str) else None
        if pending is None:
            if frame.get("type") == "error":
                log.warning("broker error: %s: %s", frame.get("code"), frame.get("message"))
            return
        pending.answer = frame
        pending.done.set()

    def _offer_delta(self, frame: dict[str, Any]) -> None:
        try:
            self._replies_in.send_nowait(Delta.from_frame(frame))
        except anyio.WouldBlock:
            self.dropped_deltas += 1
        except (*_LINK_GONE, KeyError, TypeError):
            pass  # closing, or a malformed frame

    async def _offer_deliver(self, frame: dict[str, Any]) -> None:
        out_id = frame.get("out_id")
        if not isinstance(out_id, str):
            return
        confirmed = self._seen.get(out_id)
        if confirmed is not None:
            if confirmed:
                await self._post(orjson.dumps({"type": "delivered", "out_id": out_id}) + b"\n")
            return
        try:
            deliver = Deliver.from_frame(frame)
        except (KeyError, TypeError):
            log.warning("malformed deliver %s skipped", out_id)
            return
        self._remember(out_id, confirmed=False)
        with contextlib.suppress(*_LINK_GONE):
            await self._replies_in.send(deliver)  # backpressure: see `replies`

    # -- helpers ---------------------------------------------------------------------

    async def _roundtrip(self, fields: Mapping[str, Any]) -> dict[str, Any]:
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

    async def _post(self, data: bytes) -> None:
        # Not gated on `ready`: a confirmation may be queued before the writer
        # has taken the backlog (a resend can arrive in the welcome's read),
        # and it may go out after the backlog as well as before.
        link = self._link
        if link is None:
            return
        with contextlib.suppress(*_LINK_GONE):
            await link.outbox.send(data)

    def _remember(self, out_id: str, *, confirmed: bool) -> None:
        self._seen[out_id] = confirmed
        self._seen.move_to_end(out_id)
        while len(self._seen) > self.tuning.seen_limit:
            self._seen.popitem(last=False)

    async def _flush(self) -> None:
        """Let the writer send what is queued (confirmations), within close_timeout."""
        link = self._link
        if link is None:  # as in _post: confirmations may be queued before `ready`
            return
        marker = anyio.Event()
        with anyio.move_on_after(self.tuning.close_timeout, shield=True):
            try:
                await link.outbox.send(marker)
            except _LINK_GONE:
                return
            await marker.wait()


class _Replies:
    """The iterator behind `Adapter.replies`; confirms a deliver when asked for the next."""

    def __init__(self, adapter: Adapter) -> None:
        self._adapter = adapter
        self._last: Deliver | None = None

    def __aiter__(self) -> _Replies:
        return self

    async def __anext__(self) -> Reply:
        last, self._last = self._last, None
        if last is not None and self._adapter.auto_confirm:
            await self._adapter.confirm(last.out_id)
        try:
            reply = await self._adapter._replies_out.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None
        if isinstance(reply, Deliver):
            self._last = reply
        return reply


def _take_ready(receive: MemoryObjectReceiveStream[Outgoing]) -> list[Outgoing]:
    """What else is already queued, without waiting (written in one go)."""
    out: list[Outgoing] = []
    while True:
        try:
            out.append(receive.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream):
            return out


@contextlib.contextmanager
def _single_errors() -> Iterator[None]:
    """Unwrap a task group's group of one, so callers can catch what was raised."""
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) != 1:
            raise
        inner = group.exceptions[0]
        raise inner from inner.__cause__
