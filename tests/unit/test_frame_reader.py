"""FrameReader: lines in order, the oversize frame, the unfinished frame,
and nothing left behind."""

from __future__ import annotations

import gc
import socket
import weakref
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from trio.testing import MockClock

from plumbing.rawsock import SocketReader
from wire.framing import FrameTooLarge, FrameUnfinished, LineBuffer
from wire.reader import FrameReader

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
    receive = FrameReader(reader, LineBuffer(100)).receive
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
    receive = FrameReader(reader, lines).receive
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


def _autojump() -> Any:
    return pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}), id="trio-autojump")


def _frames(ours: socket.socket, timeout_s: float) -> FrameReader:
    frames = FrameReader(SocketReader(ours), LineBuffer(100))
    frames.frame_timeout = lambda: timeout_s
    return frames


@pytest.mark.parametrize("anyio_backend", [_autojump()])
async def test_a_frame_unfinished_for_frame_timeout_is_refused(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    frames = _frames(ours, 30.0)
    theirs.sendall(b'{"a":1}\n{"b"')
    assert await frames.receive() == b'{"a":1}'
    began = anyio.current_time()

    async def more_of_it() -> None:
        await anyio.sleep(20)
        theirs.sendall(b":2")  # more bytes, still no newline: the clock runs on

    async with anyio.create_task_group() as tg:
        tg.start_soon(more_of_it)
        with pytest.raises(FrameUnfinished) as info:
            await frames.receive()
    assert anyio.current_time() - began == pytest.approx(30.0)
    assert (info.value.code, info.value.closes) == ("invalid", True)
    assert "frame_timeout_s (30 s)" in info.value.message


@pytest.mark.parametrize("anyio_backend", [_autojump()])
async def test_with_nothing_half_sent_a_connection_may_idle_for_hours(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    frames = _frames(ours, 30.0)
    theirs.sendall(b'{"a":1}\n')
    assert await frames.receive() == b'{"a":1}'
    with anyio.move_on_after(6 * 3600) as idle:
        await frames.receive()
    assert idle.cancelled_caught
    # A frame that ends in time, however slowly, is a frame.
    theirs.sendall(b'{"b"')
    await anyio.sleep(29)
    theirs.sendall(b":2}\n")
    assert await frames.receive() == b'{"b":2}'


@pytest.mark.parametrize("anyio_backend", [_autojump()])
async def test_the_clock_starts_with_the_unfinished_frame_not_the_connection(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    frames = _frames(ours, 30.0)
    start = anyio.current_time()
    theirs.sendall(b'{"a"')

    async def the_rest_and_more() -> None:
        await anyio.sleep(25)
        theirs.sendall(b':1}\n{"b"')  # one frame ends, the next begins

    async with anyio.create_task_group() as tg:
        tg.start_soon(the_rest_and_more)
        assert await frames.receive() == b'{"a":1}'
    began = anyio.current_time()
    assert began - start == pytest.approx(25.0)
    with pytest.raises(FrameUnfinished):
        await frames.receive()
    assert anyio.current_time() - began == pytest.approx(30.0)
