"""The adapter SDK against a scripted broker on a temporary Unix socket.

A scripted broker makes exact orderings repeatable that the real daemon
produces only now and then, such as a `deliver` arriving in the same read as
the `welcome`.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.abc
import orjson
import pytest

from adapters.sdk import Adapter, Backoff, Deliver, Tuning
from wire.framing import LineBuffer

pytestmark = pytest.mark.anyio

# close_timeout beyond WAIT: closing must not wait on a writer that is gone.
FAST = Tuning(reconnect=Backoff(initial=0.01, maximum=0.05), close_timeout=60.0)
WAIT = 5.0


def deliver(out_id: str) -> dict[str, object]:
    return {
        "type": "deliver",
        "out_id": out_id,
        "session": "dm:e1",
        "in_reply_to": ["m1"],
        "channel": "sms",
        "peer_kind": "dm",
        "peer_id": "+1",
        "text": "hi",
    }


async def read_frames(stream: anyio.abc.SocketStream, count: int) -> list[dict[str, object]]:
    lines = LineBuffer(1 << 20)
    frames: list[dict[str, object]] = []
    while len(frames) < count:
        frames.extend(orjson.loads(line) for line in lines.feed(await stream.receive()))
    return frames


async def test_a_confirmed_repeat_in_the_welcome_read_is_confirmed_again(
    tmp_path: Path,
) -> None:
    """The broker resends an unconfirmed reply right after `welcome`; the SDK
    must answer the repeat even before its writer has started."""
    path = tmp_path / "broker.sock"
    connections: anyio.abc.ObjectSendStream[anyio.abc.SocketStream]
    connections, accepted = anyio.create_memory_object_stream[anyio.abc.SocketStream](4)
    welcome = {"type": "welcome", "v": 1, "server": "scripted"}

    async with (
        connections,
        accepted,
        await anyio.create_unix_listener(path) as listener,
        anyio.create_task_group() as tg,
    ):
        opened: list[anyio.abc.SocketStream] = []

        async def hand_over(stream: anyio.abc.SocketStream) -> None:
            opened.append(stream)
            await connections.send(stream)

        tg.start_soon(listener.serve, hand_over)
        with anyio.fail_after(WAIT):
            async with Adapter.connect(path, "sms", require_first=False, tuning=FAST) as adapter:
                first = await accepted.receive()
                assert (await read_frames(first, 1))[0]["type"] == "hello"
                await first.send(
                    orjson.dumps(welcome) + b"\n" + orjson.dumps(deliver("o1")) + b"\n"
                )
                async for reply in adapter.replies():
                    assert isinstance(reply, Deliver) and reply.out_id == "o1"
                    break
                await adapter.confirm("o1")
                assert await read_frames(first, 1) == [{"type": "delivered", "out_id": "o1"}]
                await first.aclose()  # as if the broker restarted before recording it

                second = await accepted.receive()
                assert (await read_frames(second, 1))[0]["type"] == "hello"
                # The repeat comes in the same read as the welcome.
                await second.send(
                    orjson.dumps(welcome) + b"\n" + orjson.dumps(deliver("o1")) + b"\n"
                )
                assert await read_frames(second, 1) == [{"type": "delivered", "out_id": "o1"}]
                await second.aclose()
        tg.cancel_scope.cancel()
        for stream in opened:
            await stream.aclose()
