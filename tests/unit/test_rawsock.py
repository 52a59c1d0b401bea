"""SocketReader and send_all: the hot-path socket I/O, on both backends."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import anyio
import pytest

from plumbing.rawsock import CHUNK, SocketReader, send_all

pytestmark = pytest.mark.anyio


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    theirs.setblocking(False)
    yield ours, theirs
    ours.close()
    theirs.close()


async def _read(reader: SocketReader, size: int) -> bytes:
    got = bytearray()
    with anyio.fail_after(10):
        while len(got) < size:
            got += await reader.receive()
    return bytes(got)


async def test_bytes_arrive_in_order(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    reader = SocketReader(ours)
    payload = b"".join(f"{i:06d}\n".encode() for i in range(20_000))
    async with anyio.create_task_group() as tg:
        tg.start_soon(send_all, theirs, payload)
        assert await _read(reader, len(payload)) == payload
    reader.close()


async def test_what_arrived_meanwhile_comes_in_one_receive(
    pair: tuple[socket.socket, socket.socket], anyio_backend_name: str
) -> None:
    ours, theirs = pair
    reader = SocketReader(ours)
    for i in range(5):
        theirs.send(f"frame {i}\n".encode())
    await anyio.sleep(0.01)  # the loop polls: the callback collects all five
    data = await reader.receive()
    assert data == b"".join(f"frame {i}\n".encode() for i in range(5))
    reader.close()


async def test_end_of_stream_and_after(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    reader = SocketReader(ours)
    theirs.send(b"last words")
    theirs.shutdown(socket.SHUT_WR)
    assert await _read(reader, 10) == b"last words"
    with anyio.fail_after(5), pytest.raises(anyio.EndOfStream):
        await reader.receive()
    with pytest.raises(anyio.EndOfStream):  # and again, not a hang
        await reader.receive()
    reader.close()


async def test_a_closed_reader_refuses_and_unregisters(
    pair: tuple[socket.socket, socket.socket], anyio_backend_name: str
) -> None:
    ours, _ = pair
    reader = SocketReader(ours)
    reader.close()
    with pytest.raises(anyio.ClosedResourceError):
        await reader.receive()
    if anyio_backend_name == "asyncio":
        # Nothing left registered with the loop for this socket.
        assert not asyncio.get_running_loop().remove_reader(ours.fileno())


async def test_a_closed_reader_drops_what_waits_unread(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    # A connection that ends with bytes unread (after an oversize frame, say)
    # gives them back at once, not when the reader itself is collected.
    ours, theirs = pair
    reader = SocketReader(ours)
    theirs.send(b"x" * 1000)
    await anyio.sleep(0.01)  # on asyncio the callback collects them meanwhile
    reader.close()
    assert reader._held == 0 and not reader._chunks
    with pytest.raises(anyio.ClosedResourceError):
        await reader.receive()


async def test_a_cancelled_receive_leaves_the_reader_usable(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    reader = SocketReader(ours)
    with anyio.move_on_after(0.05) as scope:
        await reader.receive()  # nothing comes
    assert scope.cancelled_caught
    theirs.send(b"later")
    assert await _read(reader, 5) == b"later"
    reader.close()


async def test_past_high_water_the_reader_stops_taking_bytes(
    pair: tuple[socket.socket, socket.socket], anyio_backend_name: str
) -> None:
    if anyio_backend_name != "asyncio":
        pytest.skip("on trio nothing is read ahead of `receive`")
    ours, theirs = pair
    high = 64 * 1024
    reader = SocketReader(ours, high_water=high)
    payload = bytes(range(256)) * 16 * 1024  # 4 MiB: more than the reader may hold
    sent = 0
    async with anyio.create_task_group() as tg:

        async def write() -> None:
            await send_all(theirs, payload)

        tg.start_soon(write)
        await anyio.sleep(0.2)  # the writer fills the socket; nobody calls receive
        held = reader._held
        assert 0 < held < high + CHUNK  # paused near the mark, not 4 MiB in memory
        got = await _read(reader, len(payload))
        sent = len(got)
    assert sent == len(payload)
    assert got == payload
    reader.close()


async def test_send_all_waits_for_a_full_socket(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    payload = b"z" * (1 << 20)
    reader = SocketReader(ours)
    async with anyio.create_task_group() as tg:
        tg.start_soon(send_all, theirs, payload)
        await anyio.sleep(0.05)  # send_all is stuck on the full socket meanwhile
        assert await _read(reader, len(payload)) == payload
    reader.close()


async def test_a_started_send_all_finishes_when_cancelled(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    payload = b"y" * (1 << 20)
    got = b""

    async def read_all() -> None:
        nonlocal got
        await anyio.sleep(0.05)  # let send_all fill the socket and wait first
        reader = SocketReader(ours)  # not before: on asyncio it reads ahead at once
        got = await _read(reader, len(payload))
        reader.close()

    async with anyio.create_task_group() as outer:
        outer.start_soon(read_all)
        async with anyio.create_task_group() as tg:
            tg.start_soon(send_all, theirs, payload)
            await anyio.sleep(0.02)  # part of it is written, the rest waits
            tg.cancel_scope.cancel()  # too late: the rest follows
    assert got == payload


async def test_send_all_on_a_full_socket_sends_nothing_when_cancelled(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    filler = 0
    while True:  # fill the socket: the next send must wait
        try:
            filler += theirs.send(b"f" * 65536)
        except BlockingIOError:
            break
    with anyio.move_on_after(0.05):
        await send_all(theirs, b"never")
    reader = SocketReader(ours)
    got = await _read(reader, filler)
    theirs.close()
    with anyio.fail_after(5):
        while True:
            try:
                got += await reader.receive()
            except anyio.EndOfStream:
                break
    assert got == b"f" * filler  # not a byte of the cancelled send
    reader.close()


async def test_send_all_parts_arrive_whole_and_in_order_across_partial_sends(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    # Larger than the socket's buffer, so sendmsg takes them in pieces that end
    # inside a part and on a part's edge.
    parts = [b"h" * 8, bytes(range(256)) * 4096, b"", b"t" * 100_003, b"!"]
    reader = SocketReader(ours)
    async with anyio.create_task_group() as tg:
        tg.start_soon(send_all, theirs, *parts)
        got = await _read(reader, sum(map(len, parts)))
    assert got == b"".join(parts)
    reader.close()


async def test_send_all_to_a_gone_peer_is_a_broken_resource(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    ours.close()
    with pytest.raises(anyio.BrokenResourceError):
        await send_all(theirs, b"anyone?")


def test_a_blocking_socket_is_refused() -> None:
    a, b = socket.socketpair()
    try:
        with pytest.raises(ValueError, match="non-blocking"):
            SocketReader(a)
    finally:
        a.close()
        b.close()


async def test_two_readers_at_once_are_refused(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    reader = SocketReader(ours)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reader.receive)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(anyio.BusyResourceError):
            await reader.receive()
        theirs.send(b"x")  # lets the first reader finish
    reader.close()
