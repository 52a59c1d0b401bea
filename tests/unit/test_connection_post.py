"""Connection.post: direct writes while nothing waits, the flusher otherwise, one order."""

from __future__ import annotations

import socket

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from broker import connection
from broker.connection import Connection

pytestmark = pytest.mark.anyio


async def _pair() -> tuple[Connection, anyio.abc.SocketStream]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # fills after a few frames
    conn = Connection(await anyio.abc.UNIXSocketStream.from_socket(ours), "c1")
    return conn, await anyio.abc.UNIXSocketStream.from_socket(theirs)


async def _read(peer: anyio.abc.SocketStream, size: int) -> bytes:
    got = bytearray()
    with anyio.fail_after(10):
        while len(got) < size:
            got += await peer.receive()
    return bytes(got)


@pytest.mark.parametrize("yield_every", [0, 7])
async def test_posts_leave_in_order_when_the_socket_fills_up(yield_every: int) -> None:
    """0: everything is posted in one loop turn; 7: direct writes happen (and fill
    the socket) between posts, so later posts must queue behind the flusher."""
    conn, peer = await _pair()
    frames = [f"{i:05d}:".encode() + b"x" * 1000 + b"\n" for i in range(500)]
    async with anyio.create_task_group() as tg:
        conn.tg = tg
        tg.start_soon(conn.flush_forever)
        for i, frame in enumerate(frames):
            assert conn.post(frame)
            if yield_every and i % yield_every == 0:
                await anyio.lowlevel.checkpoint()
        await anyio.lowlevel.checkpoint()
        assert conn._backlogged, "the socket took everything: the test did not fill it"
        got = await _read(peer, sum(map(len, frames)))
        await conn.flushed()
        tg.cancel_scope.cancel()
    assert got == b"".join(frames)
    await conn.stream.aclose()
    await peer.aclose()


async def test_a_post_while_nothing_waits_needs_no_flusher() -> None:
    conn, peer = await _pair()
    assert conn.post(b"hello\n")  # no flusher task runs: written directly
    await anyio.lowlevel.checkpoint()  # asyncio writes at the end of the loop's turn
    assert not conn._out
    assert await _read(peer, 6) == b"hello\n"
    await conn.stream.aclose()
    await peer.aclose()


class _CountingSocket:
    """A socket whose `send` calls are counted."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sends = 0

    def send(self, data: bytes) -> int:
        self.sends += 1
        return self.sock.send(data)


async def test_posts_of_one_loop_turn_leave_in_one_write(anyio_backend_name: str) -> None:
    conn, peer = await _pair()
    assert conn._raw is not None
    counting = _CountingSocket(conn._raw)
    conn._raw = counting  # type: ignore[assignment]
    frames = [f"ack {i}\n".encode() for i in range(10)]
    for frame in frames:
        assert conn.post(frame)
    await anyio.lowlevel.checkpoint()
    assert await _read(peer, sum(map(len, frames))) == b"".join(frames)
    # asyncio coalesces (broker/connection.py); trio writes each post at once.
    assert counting.sends == (1 if anyio_backend_name == "asyncio" else len(frames))
    await conn.stream.aclose()
    await peer.aclose()


async def test_a_post_to_a_gone_client_closes_the_connection() -> None:
    conn, peer = await _pair()
    await peer.aclose()
    async with anyio.create_task_group() as tg:
        conn.tg = tg
        conn.post(b"anyone there?\n")  # True on asyncio: the write comes later
        await anyio.sleep_forever()  # cancelled by the lost connection
    assert conn.closed
    assert not conn.post(b"later\n")
    await conn.stream.aclose()


async def test_a_client_that_never_reads_is_disconnected_past_the_hard_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection, "OUT_HARD_LIMIT", 64 * 1024)
    conn, peer = await _pair()
    async with anyio.create_task_group() as tg:
        conn.tg = tg
        posted = 0
        while conn.post(b"y" * 1024):
            posted += 1
            assert posted < 10_000, "never disconnected"
        await anyio.sleep_forever()  # cancelled by the disconnect
    assert conn.closed
    assert not conn.post(b"z", droppable=True)
    await conn.stream.aclose()
    await peer.aclose()


async def test_a_send_after_a_partly_written_post_does_not_split_its_frame() -> None:
    """A post the socket took only part of leaves the rest for the flusher; a `send`
    (an op's reply, an error) that came then wrote its whole frame into the middle of
    the posted one, and the client read a line that is not JSON."""
    conn, peer = await _pair()
    posted = b'{"type": "ack", "pad": "' + b"x" * 200_000 + b'"}\n'
    async with anyio.create_task_group() as tg:
        conn.tg = tg
        tg.start_soon(conn.flush_forever)
        assert conn.post(posted)
        await anyio.lowlevel.checkpoint()  # asyncio writes at the end of the loop's turn
        assert conn._out, "the socket took the whole frame: the test did not fill it"
        sent = b'{"type": "error"}\n'
        with anyio.fail_after(10):
            async with anyio.create_task_group() as inner:
                inner.start_soon(conn.send_raw, sent)
                got = await _read(peer, len(posted) + len(sent))
        tg.cancel_scope.cancel()
    assert got == posted + sent
    await conn.stream.aclose()
    await peer.aclose()
