"""The Unix-socket server: handshake, framing, and who may connect.

Rule 1: a connection is one task group (reader and acker); nothing it does can
        reach another connection, and its failure closes only itself.
Rule 2: frames are validated before anything is handed on; a frame that fails
        is answered with an error and stores nothing.
Rule 3: an inbound frame is acked only after the commit that holds it; acks of
        one connection are written in the order the frames arrived.
Rule 4: at most `max_inflight` inbound frames of one connection wait for their
        commit; past that the broker answers `overloaded` at once.
Rule 5: after the hello, a frame begun and not finished within `frame_timeout_s`
        closes its connection (FrameReader); a connection with nothing half
        sent may stay idle for as long as it likes.
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

from ledger import logs
from ledger.ids import new_id
from ledger.rawsock import SocketReader, running_asyncio_loop

from . import systemd
from .config import Settings
from .loopclock import loop_clock
from .protocol import (
    FrameTooLarge,
    FrameUnfinished,
    Hello,
    LineBuffer,
    ProtocolError,
    decode,
    encode,
    parse_hello,
)

log = logs.get("broker.server")
HELLO_TIMEOUT_S = 10.0
SEND_TIMEOUT_S = 30.0


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


OUT_SOFT_LIMIT = 4 << 20  # past this, best-effort frames (deltas) are dropped
OUT_HARD_LIMIT = 64 << 20  # past this, the client is too slow and is disconnected


class Connection:
    """One client connection.

    `send` writes and waits; `post` writes without waiting, so an actor never
    waits on a slow client. Each keeps the order in which it was called.

    Rule 1: on asyncio, what is posted during one turn of the event loop leaves
            in one write at the end of it: the acks of a committed batch, or a
            turn's delta, reply and the next ack, cost one system call, not one
            each. On trio a post is written at once.
    Rule 2: what the socket does not take at once waits for the connection's
            flusher task, and everything posted later waits behind it.
    """

    def __init__(self, stream: anyio.abc.SocketStream, conn_id: str) -> None:
        self.stream = stream
        self.id = conn_id
        self.role: str | None = None
        self.channel: str | None = None
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
            self._out_ready = anyio.Event()
            if self._out:
                data, self._out, self._out_bytes = b"".join(self._out), [], 0
                self._sending = True
                try:
                    await self.send_raw(data)
                finally:
                    self._sending = False
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
        async with self._send_lock:
            with anyio.fail_after(SEND_TIMEOUT_S):
                await self.stream.send(data)

    async def send_error(self, err: ProtocolError) -> None:
        await self.send(err.frame())


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
            reader.close()  # before the stream closes the socket (rawsock Rule 1)

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


class FrameReader:
    """A connection's lines, one frame each.

    Rule 1: the lines before an oversize one are returned first; from then on
            every call raises FrameTooLarge.
    Rule 2: once `frame_timeout` is set (after the hello), a frame whose first
            byte came that many seconds ago and whose newline has not raises
            FrameUnfinished. With nothing half received, `receive` waits as long
            as it takes: adapters keep connections open for hours.
    Rule 3: errors are raised anew, never kept: an exception held where its own
            traceback's frames reach it is a reference cycle, and the frames and
            buffers in that traceback would wait for a full collection, which
            ledger/gc_policy.py makes rare: megabytes per refused frame.
    """

    def __init__(self, reader: SocketReader, lines: LineBuffer) -> None:
        self._reader = reader
        self._lines = lines
        self._ready: list[bytes] = []
        self._too_large = False
        self._partial_since: float | None = None  # when the unfinished frame began
        self._clock = loop_clock()
        self.frame_timeout: Callable[[], float] | None = None  # read when needed: reloads apply

    async def receive(self) -> bytes:
        ready = self._ready
        while not ready:
            if self._too_large:
                raise FrameTooLarge(self._lines.limit)
            data = await self._next_bytes()
            try:
                ready.extend(reversed(self._lines.feed(data)))
            except FrameTooLarge as exc:
                ready.extend(reversed(exc.lines_before))
                self._too_large = True
                continue
            if not self._lines.pending:
                self._partial_since = None
            elif ready or self._partial_since is None:
                # What is left began in `data`: a line ended in it, or none was pending.
                self._partial_since = self._clock()
        return ready.pop()

    async def _next_bytes(self) -> bytes:
        since, timeout = self._partial_since, self.frame_timeout
        if since is None or timeout is None:
            return await self._reader.receive()
        limit = timeout()
        with anyio.CancelScope(deadline=since + limit):
            return await self._reader.receive()
        raise FrameUnfinished(limit)


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
