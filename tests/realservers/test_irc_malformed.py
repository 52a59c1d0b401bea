"""adapters.irc against a scripted server: malformed lines are logged and skipped.

A real ngIRCd never sends a broken line, so this server is a script on a
loopback socket. The IRC adapter is anyio code: it runs on asyncio and trio.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketAttribute
from anyio.streams.buffered import BufferedByteReceiveStream

from adapters.bridge import Incoming
from adapters.irc import IrcChannel, IrcSection
from adapters.settings import AdapterSection

SCRIPT = [
    ":irc.test 001 bot :Welcome",
    ":onlyaprefix",  # no command
    ":ann!a@host PRIVMSG bot",  # no text
    "\xff\xfe not even utf-8 \xff",
    ":ann!a@host PRIVMSG bot :hello after the noise",
]


@pytest.mark.anyio
async def test_malformed_lines_are_logged_and_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    registered = anyio.Event()

    async def serve(client: anyio.abc.SocketStream) -> None:
        async with client:
            lines = BufferedByteReceiveStream(client)
            while not (await lines.receive_until(b"\n", 1000)).startswith(b"USER"):
                pass
            registered.set()
            for line in SCRIPT:
                await client.send(line.encode("latin-1") + b"\r\n")
            await anyio.sleep_forever()

    channel = IrcChannel(
        IrcSection(host="127.0.0.1", port=port, nick="bot"),
        AdapterSection(state_dir=tmp_path),
        None,
    )
    send, receive = anyio.create_memory_object_stream[Incoming](10)
    async with listener, send, receive, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        tg.start_soon(channel.run, send)
        with anyio.fail_after(10):
            message = await receive.receive()
        tg.cancel_scope.cancel()
    assert registered.is_set()
    assert (message.sender_id, message.text, message.peer_kind) == (
        "ann",
        "hello after the noise",
        "dm",
    )
    skipped = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert len(skipped) == 3
    assert "onlyaprefix" in skipped[0] and "ann!a@host" in skipped[1] and "not even" in skipped[2]
