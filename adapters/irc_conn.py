"""One connection to an IRC server: register, keep alive, read lines, send with a fence.

One writer at a time (a lock), so a PONG never lands inside a PRIVMSG. PRIVMSG lines
go at the server's pace (a token bucket), and a send is confirmed by a fence: `PING
:<token>` after the lines. A server handles a client's lines in order, so its `PONG
<token>` says every line before it was handled, and an error numeric for the target
that arrived before the PONG means the server refused them. A line read is handed to
`on_line` before the next one is read; a line that is not IRC is logged and skipped.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from adapters.irc_text import Line, MalformedLine, parse
from adapters.retry import TokenBucket

log = logging.getLogger("adapters.irc")

MAX_LINE = 8192 + 512  # IRCv3 tags (8 KiB) plus the 512-byte line
TARGET_ERRORS = frozenset({"401", "403", "404", "406", "442", "477", "486", "492"})


class LoginRefused(Exception):
    """The server refused the registration (bad password, banned, ERROR before 001)."""


class ConnectionDead(Exception):
    """The server stopped answering (no PONG within the ping interval) or closed."""


class IrcConnection:
    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        bucket: TokenBucket,
        on_line: Callable[[IrcConnection, Line], Awaitable[None]],
    ) -> None:
        self.stream = stream
        self.bucket = bucket
        self.nick = ""
        self.registered = anyio.Event()
        self._reader = BufferedByteReceiveStream(stream)
        self._on_line = on_line
        self._lock = anyio.Lock()
        self._fences: dict[str, anyio.Event] = {}
        self._errors: dict[str, str] = {}  # lower-cased target -> the latest error numeric's text
        self._tokens = itertools.count(1)

    async def send(self, line: str) -> None:
        """One whole line at a time; CR, LF and NUL in `line` are dropped."""
        clean = line.replace("\r", "").replace("\n", "").replace("\x00", "")
        async with self._lock:
            await self.stream.send(clean.encode() + b"\r\n")

    async def privmsgs(self, target: str, bodies: list[str]) -> str | None:
        """Send the lines, then fence; the server's refusal, or None."""
        self._errors.pop(target.lower(), None)
        for body in bodies:
            delay = self.bucket.take(anyio.current_time())
            if delay > 0:
                await anyio.sleep(delay)
            await self.send(f"PRIVMSG {target} :{body}")
        token = f"fence-{next(self._tokens)}"
        done = self._fences[token] = anyio.Event()
        try:
            await self.send(f"PING :{token}")
            await done.wait()  # bounded by the caller
        finally:
            self._fences.pop(token, None)
        return self._errors.pop(target.lower(), None)

    async def read_forever(self, ping_interval: float) -> None:
        """Hand each line to `on_line` in turn; ConnectionDead when the server goes quiet."""
        awaiting_pong = False
        while True:
            raw: bytes | None = None
            with anyio.move_on_after(ping_interval):
                try:
                    raw = await self._reader.receive_until(b"\n", MAX_LINE)
                except (anyio.EndOfStream, anyio.IncompleteRead) as exc:
                    raise ConnectionDead("the server closed the connection") from exc
                except anyio.DelimiterNotFound:
                    log.warning("a line over %d bytes from the server; dropping the link", MAX_LINE)
                    raise ConnectionDead("line too long") from None
            if raw is None:
                if awaiting_pong:
                    raise ConnectionDead(f"no answer from the server in {2 * ping_interval:.0f}s")
                awaiting_pong = True
                await self.send("PING :keepalive")
                continue
            awaiting_pong = False
            await self._handle(raw.decode("utf-8", errors="replace").rstrip("\r"))

    async def _handle(self, text: str) -> None:
        if not text:
            return
        try:
            line = parse(text)
        except MalformedLine:
            log.warning("malformed line from the server skipped: %r", text[:200])
            return
        if line.command == "PING":
            await self.send("PONG :" + (line.params[-1] if line.params else ""))
        elif line.command == "PONG" and line.params:
            fence = self._fences.get(line.params[-1])
            if fence is not None:
                fence.set()
        elif line.command in TARGET_ERRORS and len(line.params) >= 2:
            self._errors[line.params[1].lower()] = f"{line.command} {line.params[-1]}"
        await self._on_line(self, line)

    async def aclose(self) -> None:
        with contextlib.suppress(Exception), anyio.move_on_after(1, shield=True):
            await self.send("QUIT :bye")
        await self.stream.aclose()
