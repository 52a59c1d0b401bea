"""A connection's bytes as frames, for broker/server.py: an oversize line, or a frame
begun and not finished in time after the hello, ends the connection.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from plumbing.rawsock import SocketReader
from wire.framing import FrameTooLarge, FrameUnfinished, LineBuffer


class FrameReader:
    """A connection's lines, one frame each.

    The lines before an oversize one are returned first; from then on every call
    raises FrameTooLarge. Once `frame_timeout` is set (after the hello), a frame
    whose first byte came that many seconds ago and whose newline has not raises
    FrameUnfinished; with nothing half received, `receive` waits as long as it
    takes, as adapters keep connections open for hours.

    Errors are raised anew, never kept: an exception held where its own traceback's
    frames reach it is a reference cycle, and the frames and buffers in that
    traceback would wait for a full collection, which plumbing/gc_policy.py makes
    rare.
    """

    def __init__(self, reader: SocketReader, lines: LineBuffer) -> None:
        self._reader = reader
        self._lines = lines
        self._ready: list[bytes] = []
        self._too_large = False
        self._partial_since: float | None = None  # when the unfinished frame began
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
                self._partial_since = anyio.current_time()
        return ready.pop()

    async def _next_bytes(self) -> bytes:
        since, timeout = self._partial_since, self.frame_timeout
        if since is None or timeout is None:
            return await self._reader.receive()
        limit = timeout()
        with anyio.CancelScope(deadline=since + limit):
            return await self._reader.receive()
        raise FrameUnfinished(limit)
