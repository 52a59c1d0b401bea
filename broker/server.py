"""The Unix-socket server: accepting, the handshake, and who may connect.

A connection is one task group (reader and acker): nothing it does can reach another
connection, and its failure closes only itself. Frames are validated before anything
is handed on, and a frame that fails is answered with an error and stores nothing. An
inbound frame is acked only after the commit that holds it, and acks of one connection
are written in the order the frames arrived; at most `max_inflight` inbound frames of
one connection wait for their commit, and past that the broker answers `overloaded`
at once. After the hello, a frame begun and not finished within `frame_timeout_s`
closes its connection (wire/reader.py); a connection with nothing half sent may stay
idle for as long as it likes.

What the broker writes to a connection, and how, is broker/connection.py's.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from broker import systemd
from broker.config import Settings
from broker.connection import Connection
from plumbing import logs
from plumbing.ids import new_id
from plumbing.rawsock import SocketReader
from wire.frames import Hello, parse_hello
from wire.framing import FrameTooLarge, FrameUnfinished, LineBuffer, ProtocolError, decode
from wire.reader import FrameReader

log = logs.get("broker.server")
HELLO_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class PeerCred:
    pid: int
    uid: int
    gid: int


def peer_credentials(stream: anyio.abc.SocketStream) -> PeerCred | None:
    raw: socket.socket = stream.extra(SocketAttribute.raw_socket)
    if raw.family != socket.AF_UNIX or not hasattr(socket, "SO_PEERCRED"):
        return None
    data = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", data)
    return PeerCred(pid, uid, gid)


Handler = Callable[[Connection, dict[str, Any]], Awaitable[None]]


class Server:
    """Accepts connections and hands validated frames to the broker's handlers."""

    def __init__(
        self,
        settings: Settings,
        on_adapter_frame: Handler,
        on_operator_frame: Handler,
        on_hello: Callable[[Connection, Hello], Awaitable[None]],
        on_close: Callable[[Connection], Awaitable[None]],
    ) -> None:
        self.settings = settings
        self._on_adapter_frame = on_adapter_frame
        self._on_operator_frame = on_operator_frame
        self._on_hello = on_hello
        self._on_close = on_close
        self.apply_auth(settings)
        self.connections: dict[str, Connection] = {}
        self._accepting = anyio.CancelScope()
        self._unlink_on_stop = True  # False when the socket came from systemd

    def apply_auth(self, settings: Settings) -> None:
        """Take the peer and token rules of `settings` (at start and on reload)."""
        self.settings = settings
        uid, gid = os.getuid(), os.getgid()
        auth = settings.auth
        self._uids = frozenset(auth.allowed_uids if auth.allowed_uids is not None else [uid])
        self._gids = frozenset(auth.allowed_gids if auth.allowed_gids is not None else [gid])

    async def open_listener(self) -> anyio.abc.SocketListener:
        activated = await systemd.activated_listener()
        if activated is not None:
            log.info(
                "socket activated: serving on the socket systemd passed",
                socket=str(activated.extra(SocketAttribute.local_address)),
                configured=str(self.settings.socket_path),
            )
            self._unlink_on_stop = False
            return activated
        path = self.settings.socket_path
        path.parent.mkdir(parents=True, exist_ok=True)
        await _refuse_if_live(path)
        return await anyio.create_unix_listener(path, mode=self.settings.socket_mode)

    async def serve(
        self,
        listener: anyio.abc.SocketListener,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept until `stop_accepting`; connections live on until cancelled."""
        async with anyio.create_task_group() as tg:
            task_status.started()
            try:
                with self._accepting:
                    async with listener:
                        while True:
                            stream = await listener.accept()
                            tg.start_soon(self._handle, stream)
            finally:
                # Also when cancelled: a stop that never yields to this task between
                # `stop_accepting` and the daemon's cancel must not leave the socket file.
                if self._unlink_on_stop:
                    with contextlib.suppress(OSError):
                        os.unlink(self.settings.socket_path)
            await anyio.sleep_forever()

    async def flush_all(self) -> None:
        """Return once every connection has written out what it was posted."""
        for conn in list(self.connections.values()):
            await conn.flushed()

    def stop_accepting(self) -> None:
        """Close the listening socket; open connections keep going."""
        self._accepting.cancel()

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        conn = Connection(stream, new_id())
        try:
            await self._handle_connection(conn)
        except Exception:  # includes groups from the connection's own tasks
            log.exception("connection failed", conn=conn.id, role=conn.role, channel=conn.channel)

    async def _handle_connection(self, conn: Connection) -> None:
        stream = conn.stream
        async with stream, anyio.create_task_group() as tg:
            conn.tg = tg
            try:
                await self._converse(conn)
            except ProtocolError as err:
                await self._try_send(conn, err)
            except (
                anyio.EndOfStream,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
                TimeoutError,
                ConnectionError,
            ):
                pass
            finally:
                tg.cancel_scope.cancel()
                conn.closed = True
                self.connections.pop(conn.id, None)
                if conn.role is not None:
                    with anyio.CancelScope(shield=True):
                        await self._on_close(conn)
                log.debug("connection closed", conn=conn.id, role=conn.role, channel=conn.channel)

    async def _try_send(self, conn: Connection, err: ProtocolError) -> None:
        try:
            with anyio.move_on_after(1.0):
                await conn.send_error(err)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            pass
        if isinstance(err, FrameTooLarge):
            log.warning("frame too large, closing", conn=conn.id, channel=conn.channel)
        elif isinstance(err, FrameUnfinished):
            log.warning(
                "frame left unfinished, closing",
                conn=conn.id,
                channel=conn.channel,
                frame_timeout_s=err.timeout_s,
            )
        else:
            log.info("connection refused", conn=conn.id, code=err.code, reason=err.message)

    def _authorize_peer(self, conn: Connection) -> None:
        cred = peer_credentials(conn.stream)
        if cred is None:
            return
        conn.uid = cred.uid
        if cred.uid not in self._uids and cred.gid not in self._gids:
            raise ProtocolError(
                "unauthorized", f"uid {cred.uid} / gid {cred.gid} may not connect to this broker"
            )

    def _authorize_hello(self, hello: Hello) -> None:
        if hello.role != "adapter":
            return
        assert hello.channel is not None
        expected = self.settings.auth.channel_tokens.get(hello.channel)
        if expected is None:
            if self.settings.auth.require_token:
                raise ProtocolError("unauthorized", f"no token is configured for {hello.channel!r}")
            return
        if hello.token is None or not hmac.compare_digest(hello.token.encode(), expected.encode()):
            raise ProtocolError("unauthorized", f"wrong or missing token for {hello.channel!r}")

    async def _converse(self, conn: Connection) -> None:
        self._authorize_peer(conn)
        raw: socket.socket = conn.stream.extra(SocketAttribute.raw_socket)
        reader = SocketReader(raw, high_water=max(1 << 20, 2 * self.settings.max_frame_bytes))
        try:
            await self._converse_on(conn, reader)
        finally:
            reader.close()  # before the stream closes the socket (plumbing/rawsock.py)

    async def _converse_on(self, conn: Connection, reader: SocketReader) -> None:
        frames = FrameReader(reader, LineBuffer(self.settings.max_frame_bytes))
        receive = frames.receive
        with anyio.fail_after(HELLO_TIMEOUT_S):
            first = await receive()
        first_req: object = None
        try:
            first_frame = decode(first)
            first_req = first_frame.get("req")
            hello = parse_hello(first_frame)
        except ProtocolError as err:
            if err.code in ("bad_json", "invalid"):
                err = ProtocolError(
                    "bad_hello",
                    f"the first frame must be a valid hello ({err.message})",
                    field=err.field,
                    req=err.req,
                )
            raise err
        self._authorize_hello(hello)
        conn.role, conn.channel = hello.role, hello.channel
        self.connections[conn.id] = conn
        assert conn.tg is not None
        conn.tg.start_soon(_flusher, conn)
        await conn.send(
            {
                "type": "welcome",
                "v": 1,
                "server": f"{self.settings.server_name} {_version()}",
                "conn": conn.id,
                **({"req": first_req} if isinstance(first_req, str) else {}),
            }
        )
        log.info("connected", conn=conn.id, role=conn.role, channel=conn.channel)
        frames.frame_timeout = lambda: self.settings.frame_timeout_s
        await self._on_hello(conn, hello)
        handler = self._on_adapter_frame if hello.role == "adapter" else self._on_operator_frame
        while True:
            line = await receive()
            conn.frame_bytes = len(line)
            frame: dict[str, Any] = {}
            try:
                frame = decode(line)
                await handler(conn, frame)
            except ProtocolError as err:
                if err.closes:
                    raise
                await conn.send_error(err)
            except Exception:
                # A bug reached by one frame answers that frame; it never takes
                # the connection, let alone the daemon, down with it.
                req = frame.get("req")
                log.exception("frame handler failed", conn=conn.id, channel=conn.channel, req=req)
                await conn.send_error(
                    ProtocolError(
                        "internal",
                        "the broker failed on this frame (see its log)",
                        req=req if isinstance(req, str) else None,
                    )
                )


async def _flusher(conn: Connection) -> None:
    try:
        await conn.flush_forever()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, TimeoutError, ConnectionError):
        conn.closed = True
        if conn.tg is not None:
            conn.tg.cancel_scope.cancel()


async def _refuse_if_live(path: Path) -> None:
    """Refuse to take over a socket another live broker is listening on."""
    if not await anyio.Path(path).exists():
        return
    try:
        with anyio.fail_after(1.0):
            stream = await anyio.connect_unix(path)
    except (OSError, TimeoutError):
        return  # stale: nobody listens; the listener replaces it
    await stream.aclose()
    raise AlreadyRunning(f"another broker is already listening on {path}")


class AlreadyRunning(Exception):
    """Another broker listens on the configured socket."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agent-broker")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"
