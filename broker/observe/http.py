"""A small HTTP/1.1 server for the daemon's own endpoints (`/metrics`), over h11.

An endpoint listens on "host:port" or on a Unix socket path (anything with a
slash). Its listener is opened before the daemon says it is ready, so an
address in use stops the start naming the configuration key, and a request
that never finishes cannot hold a connection past `REQUEST_TIMEOUT_S`. Each
connection is answered one request at a time and closed after the answer.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from plumbing import logs

if TYPE_CHECKING:
    import h11

log = logs.get("broker.observe")
REQUEST_TIMEOUT_S = 10.0
MAX_REQUEST_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


Handler = Callable[[str, str], Awaitable[Response]]  # (method, target) -> response


class EndpointError(Exception):
    """An endpoint cannot start (its address in use, its token file unsafe); names the key."""

    def __init__(self, key: str, address: str, reason: str) -> None:
        super().__init__(f"{key} = {address!r}: {reason}")
        self.key = key


def is_unix(address: str) -> bool:
    return "/" in address


async def listen(key: str, address: str) -> anyio.abc.Listener[anyio.abc.ByteStream]:
    """A listener on `address` (the value of config key `key`), or EndpointError."""
    try:
        if is_unix(address):
            path = Path(address)
            await anyio.to_thread.run_sync(unlink_stale, key, path)
            return await anyio.create_unix_listener(path, mode=0o660)
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise EndpointError(key, address, 'expected "host:port" or a Unix socket path')
        return await anyio.create_tcp_listener(
            local_host=host.strip("[]") or "127.0.0.1", local_port=int(port)
        )
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise EndpointError(key, address, "the address is in use") from exc
        raise EndpointError(key, address, exc.strerror or str(exc)) from exc


def unlink_stale(key: str, path: Path) -> None:
    """A socket file nobody listens on is a leftover of a killed daemon: remove it."""
    import socket

    if not path.is_socket():
        return
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(os.fspath(path))
    except OSError:
        path.unlink(missing_ok=True)
        return
    finally:
        probe.close()
    raise EndpointError(key, str(path), "another process listens on it")


async def serve(
    listener: anyio.abc.Listener[anyio.abc.ByteStream],
    handler: Handler,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Answer requests on `listener` until cancelled."""
    async with listener:
        task_status.started()
        await listener.serve(lambda stream: _connection(stream, handler))


async def _connection(stream: anyio.abc.ByteStream, handler: Handler) -> None:
    import h11  # imported where a connection is served: most daemons serve none

    async with stream:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_BYTES)
        request: h11.Request | None = None
        with anyio.move_on_after(REQUEST_TIMEOUT_S):
            try:
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        data = await stream.receive(65536)
                        conn.receive_data(data)
                        continue
                    if isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                        break
            except (anyio.EndOfStream, anyio.BrokenResourceError, h11.RemoteProtocolError):
                return
        if request is None or conn.our_state is not h11.SEND_RESPONSE:
            return
        try:
            response = await handler(request.method.decode(), request.target.decode())
        except Exception:
            log.exception("an endpoint failed", target=request.target.decode(errors="replace"))
            response = Response(500, b"internal error (see the broker log)\n")
        headers = [
            ("content-type", response.content_type),
            ("content-length", str(len(response.body))),
            ("connection", "close"),
        ]
        try:
            await stream.send(
                conn.send(h11.Response(status_code=response.status, headers=headers))
                + conn.send(h11.Data(data=response.body))
                + conn.send(h11.EndOfMessage())
            )
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return
