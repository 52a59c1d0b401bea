"""The adapter SDK: one channel adapter's connection to the broker.

    async with Adapter.connect("/run/broker.sock", "sms", token=token) as adapter:
        ack = await adapter.send("sms-1", "+15550001", "hello")
        async for reply in adapter.replies():
            if isinstance(reply, Deliver):
                ...  # carry it out
                await adapter.confirm(reply.out_id)

Works under asyncio and trio (anyio). docs/adapters.md has a complete example.

Every task lives in the adapter's task group: leaving `async with` ends them all,
after a bounded flush of what was queued to write. The connection, its resends and its
one writer are adapters/connector.py's; the replies and their dedup by out_id are
adapters/replies.py's. This module is the public surface.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import orjson

from adapters.connector import Connector
from adapters.replies import ReplyBuffer
from adapters.types import (
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
        self.overloaded = 0  # `overloaded` answers retried
        self._replies = ReplyBuffer(replies_buffer, tuning.seen_limit, self._post)
        self._connector = Connector(self.path, channel, token, tuning, self._replies.offer)

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
        replies = adapter._replies
        with _single_errors(), replies.replies_in, replies.replies_out:
            async with anyio.create_task_group() as tg:
                await tg.start(adapter._connector.supervise, require_first)
                try:
                    yield adapter
                finally:
                    await adapter._connector.flush()
                    replies.replies_in.close()  # consumers elsewhere see the end
                    tg.cancel_scope.cancel()

    # -- the public surface ------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._connector.connected

    async def wait_connected(self) -> None:
        """Until a connection is up (the caller bounds the wait)."""
        await self._connector.wait_connected()

    @property
    def welcome(self) -> dict[str, Any]:
        """The broker's `welcome` frame of the latest connection."""
        return self._connector.welcome

    @property
    def connects(self) -> int:
        """Successful handshakes so far."""
        return self._connector.connects

    @property
    def dropped_deltas(self) -> int:
        """Deltas dropped because the replies buffer was full."""
        return self._replies.dropped_deltas

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
            answer = await self._connector.roundtrip(fields)
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
        self._replies.remember(out_id, confirmed=True)
        await self._post(orjson.dumps({"type": "delivered", "out_id": out_id}) + b"\n")

    async def _post(self, data: bytes) -> None:
        await self._connector.post(data)


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
            reply = await self._adapter._replies.replies_out.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None
        if isinstance(reply, Deliver):
            self._last = reply
        return reply


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
