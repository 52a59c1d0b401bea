"""A plain IRC client for the tests: a person on the server, over a real TCP socket."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from adapters.irc_text import Line, parse

WAIT = 10.0


class IrcClient:
    def __init__(self, stream: anyio.abc.ByteStream, nick: str) -> None:
        self.stream = stream
        self.nick = nick
        self.reader = BufferedByteReceiveStream(stream)
        self.seen: list[Line] = []
        self._stash: list[Line] = []

    @classmethod
    async def connect(cls, port: int, nick: str, ca_file: Path | None = None) -> IrcClient:
        """Over TLS when `ca_file` (the server's certificate authority) is given."""
        with anyio.fail_after(WAIT):
            stream: anyio.abc.ByteStream
            if ca_file is None:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            else:
                context = ssl.create_default_context(cafile=str(ca_file))
                stream = await anyio.connect_tcp("127.0.0.1", port, ssl_context=context)
            client = cls(stream, nick)
            await client.send(f"NICK {nick}")
            await client.send(f"USER {nick} 0 * :{nick}")
            await client.expect(lambda line: line.command == "001")
        return client

    async def send(self, line: str) -> None:
        await self.stream.send(line.encode() + b"\r\n")

    async def join(self, channel: str) -> None:
        await self.send(f"JOIN {channel}")
        await self.expect(lambda line: line.command == "366")

    async def say(self, target: str, text: str) -> None:
        await self.send(f"PRIVMSG {target} :{text}")

    async def expect(self, pred: Callable[[Line], bool], within: float = WAIT) -> Line:
        """The first line (kept or new) matching `pred`; the others are kept."""
        for n, line in enumerate(self._stash):
            if pred(line):
                del self._stash[n]
                return line
        with anyio.fail_after(within):
            while True:
                raw = await self.reader.receive_until(b"\n", 10_000)
                line = parse(raw.decode().rstrip("\r"))
                self.seen.append(line)
                if line.command == "PING":
                    await self.send("PONG :" + line.params[-1])
                    continue
                if pred(line):
                    return line
                self._stash.append(line)

    async def privmsgs_from(self, nick: str, within: float) -> list[Line]:
        """Every PRIVMSG from `nick` that arrives within `within` seconds."""
        out: list[Line] = []
        with anyio.move_on_after(within):
            while True:
                out.append(await self.expect(lambda x: _from(x, nick), within))
        return out

    async def aclose(self) -> None:
        await self.stream.aclose()


def _from(line: Line, nick: str) -> bool:
    return line.command == "PRIVMSG" and line.nick == nick


def privmsg_from(nick: str, target: str | None = None) -> Callable[[Line], bool]:
    def pred(line: Line) -> bool:
        return _from(line, nick) and (target is None or line.params[0] == target)

    return pred
