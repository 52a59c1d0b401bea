"""The one async client of the wire protocol: operators (brokerctl), the library's
`Store.connect` (ledger/api/remote.py), tests and benchmarks.

The adapter SDK in `adapters/` builds on this; it adds resend and backoff.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import orjson
from anyio.abc import SocketAttribute

from plumbing.ids import new_id
from plumbing.rawsock import SocketReader
from wire.framing import LineBuffer


class BrokerError(Exception):
    """An `error` frame from the broker."""

    def __init__(self, frame: dict[str, Any]) -> None:
        super().__init__(f"{frame.get('code')}: {frame.get('message')}")
        self.frame = frame
        self.code = str(frame.get("code"))
        self.field = frame.get("field")


class BrokerClient:
    def __init__(self, stream: anyio.abc.SocketStream, max_frame_bytes: int = 64 << 20) -> None:
        self.stream = stream
        self._reader: SocketReader | None = None  # made in the event loop, on first use
        self._lines = LineBuffer(max_frame_bytes)
        self._ready: list[bytes] = []
        self.welcome: dict[str, Any] = {}

    @classmethod
    async def connect(
        cls,
        path: Path | str,
        *,
        role: str = "operator",
        channel: str | None = None,
        token: str | None = None,
    ) -> BrokerClient:
        stream = await anyio.connect_unix(path)
        client = cls(stream)
        hello: dict[str, Any] = {"type": "hello", "v": 1, "role": role}
        if channel is not None:
            hello["channel"] = channel
        if token is not None:
            hello["token"] = token
        try:
            await client.send(hello)
            reply = await client.recv()
        except BaseException:
            await client.aclose()
            raise
        if reply.get("type") != "welcome":
            await client.aclose()
            raise BrokerError(reply)
        client.welcome = reply
        return client

    async def __aenter__(self) -> BrokerClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._reader is not None:
            self._reader.close()  # before the socket closes (plumbing/rawsock.py)
        await self.stream.aclose()

    def close_now(self) -> None:
        """Close from blocking code, whose event loop may be gone (a library session
        closed after its `asyncio.run`)."""
        if self._reader is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop's poller
                self._reader.close()
        self.stream.extra(SocketAttribute.raw_socket).close()

    async def send(self, frame: dict[str, Any]) -> None:
        await self.stream.send(orjson.dumps(frame) + b"\n")

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send(data)

    async def recv(self) -> dict[str, Any]:
        while not self._ready:
            if self._reader is None:
                self._reader = SocketReader(self.stream.extra(SocketAttribute.raw_socket))
            data = await self._reader.receive()
            self._ready.extend(reversed(self._lines.feed(data)))
        frame: dict[str, Any] = orjson.loads(self._ready.pop())
        return frame

    async def recv_until(self, req: str) -> dict[str, Any]:
        """The next reply to `req`, skipping unrelated frames (deltas, deliveries)."""
        while True:
            frame = await self.recv()
            if frame.get("req") == req:
                return frame

    async def op(self, name: str, /, **args: Any) -> Any:
        req = new_id()
        await self.send({"type": "op", "req": req, "op": name, "args": args})
        reply = await self.recv_until(req)
        if reply.get("type") == "error":
            raise BrokerError(reply)
        return reply.get("data")
