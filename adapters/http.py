"""A small HTTP/1.1 server: h11 (the protocol, no I/O) over anyio streams.

Just enough for a webhook: whole-body requests up to a limit, keep-alive,
bounded waits, graceful shutdown. Not a general web server.

Every wait is bounded: for the next request on an idle connection (`idle_timeout`),
for the rest of a request once it began (`read_timeout`), for a response to be
written (`write_timeout`). A body over `max_body` is answered 413 without reading the
rest, and the connection is closed (its remaining bytes are not a request).
`shutdown` stops accepting at once, closes idle connections, lets requests in
progress finish until the grace deadline, then cancels.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import h11
import orjson

log = logging.getLogger("adapters.http")

_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError)


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, bytes]  # lower-case names; a repeated header keeps its last value
    body: bytes


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False  # close the connection after this response

    @classmethod
    def json(cls, status: int, data: Any, *headers: tuple[str, str]) -> Response:
        return cls(status, orjson.dumps(data), (("content-type", "application/json"), *headers))


Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Limits:
    max_body: int = 1 << 20
    max_head: int = 16 << 10
    idle_timeout: float = 30.0
    read_timeout: float = 10.0
    write_timeout: float = 10.0


@dataclass
class HttpServer:
    handler: Handler
    limits: Limits = field(default_factory=Limits)
    closing: bool = False
    _accepting: anyio.CancelScope | None = None
    _connections: anyio.CancelScope | None = None
    _idle: set[anyio.CancelScope] = field(default_factory=set)

    async def serve(
        self,
        listener: anyio.abc.Listener[anyio.abc.SocketStream],
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept until `shutdown`; return once every connection has ended."""
        async with anyio.create_task_group() as connections:
            self._connections = connections.cancel_scope
            with anyio.CancelScope() as self._accepting:
                task_status.started()
                async with listener:
                    await listener.serve(self._connection, connections)

    def shutdown(self, grace: float) -> None:
        self.closing = True
        if self._accepting is not None:
            self._accepting.cancel()
        for scope in list(self._idle):
            scope.cancel()
        if self._connections is not None:
            self._connections.deadline = min(
                self._connections.deadline, anyio.current_time() + grace
            )

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head)
        async with stream:
            try:
                await self._exchange(conn, stream)
            except h11.RemoteProtocolError as exc:
                await self._refuse(conn, stream, exc.error_status_hint)
            except (*_GONE, TimeoutError):
                return

    async def _exchange(self, conn: h11.Connection, stream: anyio.abc.SocketStream) -> None:
        """Request, response, repeat while the connection may be kept."""
        while not self.closing:
            request = await self._read_request(conn, stream)
            if request is None:
                return
            if isinstance(request, Response):
                await self._send(conn, stream, request)
                return
            response = await self._respond(request)
            await self._send(conn, stream, response)
            if response.close or conn.our_state is not h11.DONE:
                return
            if conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    async def _read_request(
        self, conn: h11.Connection, stream: anyio.abc.SocketStream
    ) -> Request | Response | None:
        """The next request; a Response to send instead; None to close quietly."""
        head: Any = None
        with anyio.CancelScope() as idle:
            self._idle.add(idle)
            try:
                if self.closing:
                    return None
                with anyio.fail_after(self.limits.idle_timeout):
                    head = await _next_event(conn, stream)
            finally:
                self._idle.discard(idle)
        if idle.cancelled_caught or not isinstance(head, h11.Request):
            return None
        with anyio.fail_after(self.limits.read_timeout):
            return await self._read_body(conn, stream, head)

    async def _read_body(
        self, conn: h11.Connection, stream: anyio.abc.SocketStream, head: h11.Request
    ) -> Request | Response:
        too_large = _too_large(self.limits.max_body)
        length = dict(head.headers).get(b"content-length")
        if length is not None and int(length) > self.limits.max_body:
            return too_large
        if conn.they_are_waiting_for_100_continue:
            await self._write(
                stream, conn.send(h11.InformationalResponse(status_code=100, headers=[]))
            )
        body = bytearray()
        while True:
            event = await _next_event(conn, stream)
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.limits.max_body:
                    return too_large
            elif isinstance(event, h11.EndOfMessage):
                headers = {k.decode().lower(): v for k, v in head.headers}
                path = head.target.decode("latin-1").split("?", 1)[0]
                return Request(head.method.decode(), path, headers, bytes(body))
            else:  # pragma: no cover - h11 raises on a connection closed mid-body
                raise h11.RemoteProtocolError("unexpected event in a request body")

    async def _respond(self, request: Request) -> Response:
        try:
            return await self.handler(request)
        except Exception:
            log.exception("handler failed on %s %s", request.method, request.path)
            return Response.json(500, {"code": "internal", "message": "the handler failed"})

    async def _send(
        self, conn: h11.Connection, stream: anyio.abc.SocketStream, response: Response
    ) -> None:
        headers = [*response.headers, ("content-length", str(len(response.body)))]
        if response.close or self.closing:
            headers.append(("connection", "close"))
        data = b"".join(
            conn.send(event) or b""
            for event in (
                h11.Response(status_code=response.status, headers=headers),
                h11.Data(data=response.body),
                h11.EndOfMessage(),
            )
        )
        await self._write(stream, data)

    async def _write(self, stream: anyio.abc.SocketStream, data: bytes | None) -> None:
        if data:
            with anyio.fail_after(self.limits.write_timeout):
                await stream.send(data)

    async def _refuse(
        self, conn: h11.Connection, stream: anyio.abc.SocketStream, status: int
    ) -> None:
        """Answer a malformed request if h11 still lets us, then close."""
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        body = {"code": "bad_request", "message": "malformed HTTP request"}
        try:
            await self._send(conn, stream, Response.json(status, body))
        except (*_GONE, TimeoutError, h11.LocalProtocolError):
            return


async def _next_event(conn: h11.Connection, stream: anyio.abc.SocketStream) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        try:
            data = await stream.receive(65536)
        except anyio.EndOfStream:
            data = b""
        conn.receive_data(data)


def _too_large(limit: int) -> Response:
    body = orjson.dumps({"code": "too_large", "message": f"the body is over {limit} bytes"})
    return Response(413, body, (("content-type", "application/json"),), close=True)
