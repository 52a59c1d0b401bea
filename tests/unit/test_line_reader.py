"""The server's line reader: lines in order, then the oversize frame, and nothing left behind."""

from __future__ import annotations

import gc
import socket
import weakref
from collections.abc import Iterator

import anyio
import pytest

from broker import server
from broker.protocol import FrameTooLarge, LineBuffer
from broker.rawsock import SocketReader

pytestmark = pytest.mark.anyio


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    yield ours, theirs
    ours.close()
    theirs.close()


@pytest.fixture
def no_collector() -> Iterator[None]:
    """Only reference counting frees memory, as between the daemon's rare collections."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def test_lines_before_an_oversize_one_come_first(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    reader = SocketReader(ours)
    receive = server._line_reader(reader, LineBuffer(100))
    theirs.sendall(b"one\ntwo\n" + b"x" * 101 + b"\n")
    with anyio.fail_after(5):
        assert await receive() == b"one"
        assert await receive() == b"two"
        for _ in range(2):  # and again: the stream stays out of step
            with pytest.raises(FrameTooLarge):
                await receive()
    reader.close()


async def test_an_oversize_frame_leaves_no_reference_cycle(
    pair: tuple[socket.socket, socket.socket], no_collector: None
) -> None:
    # The daemon's tuned collector runs a full collection rarely; what only the
    # collector can free stays for a long while, a connection's buffers with it.
    ours, theirs = pair
    reader = SocketReader(ours)
    lines = LineBuffer(1024)
    receive = server._line_reader(reader, lines)
    freed = weakref.ref(lines)
    theirs.sendall(b"ok\n" + b"x" * 2000)
    with anyio.fail_after(5):
        assert await receive() == b"ok"
        try:
            await receive()
        except FrameTooLarge as exc:
            error = weakref.ref(exc)
        else:
            raise AssertionError("the oversize frame was not refused")
    reader.close()
    del receive, lines
    assert error() is None, "the error outlives its handler: it is in a reference cycle"
    assert freed() is None, "the connection's line buffer is kept alive by a reference cycle"
