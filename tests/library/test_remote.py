"""`Store.connect`: the Store's calls through a real daemon's socket (the
`store.call` op), on asyncio and trio for the client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from ledger.api import Conflict, NotFound, Store
from tests.harness import DaemonProcess

pytestmark = pytest.mark.anyio


async def test_the_store_calls_through_a_daemon(daemon: DaemonProcess) -> None:
    async with await Store.connect(daemon.socket) as store:
        made = await store.create("chat", title="Remote", metadata={"k": 1})
        assert (made.id, made.title, made.metadata, made.kind) == (
            "chat",
            "Remote",
            {"k": 1},
            "library",
        )
        first = await store.append("chat", [{"role": "user", "content": "hi"}, 7])
        await store.append("chat", [["a", None]], usage=(3, 4))
        assert await store.items("chat") == [{"role": "user", "content": "hi"}, 7, ["a", None]]
        assert await store.last("chat", 2) == [7, ["a", None]]
        assert (await store.turns("chat"))[0].items == [
            {"role": "user", "content": "hi"},
            7,
        ]
        fork = await store.fork(first, "chat-fork")
        assert fork.parent_turn == first and await store.items("chat-fork") == [
            {"role": "user", "content": "hi"},
            7,
        ]
        assert await store.pop("chat") == ["a", None]
        data = await store.export_jsonl("chat")
        copy = await store.import_jsonl(data, "chat-copy")
        assert await store.items(copy.id) == [{"role": "user", "content": "hi"}, 7]
        await store.compact("chat", lambda items: [f"{len(items)} items"])
        assert await store.items("chat") == ["2 items"]
        await store.set_title("chat", "Renamed")
        page = await store.list_sessions(title_contains="renamed")
        assert [s.id for s in page.sessions] == ["chat"]
        await store.clear("chat")
        assert await store.items("chat") == []
        with pytest.raises(NotFound):
            await store.get("ghost")
        with pytest.raises(Conflict):
            await store.create("chat")
        with pytest.raises(TypeError, match="item 0"):
            await store.append("chat", [object()])
        await store.delete("chat-copy")
        with pytest.raises(NotFound):
            await store.get("chat-copy")


async def test_two_connections_appending_to_one_session_never_interleave(
    daemon: DaemonProcess,
) -> None:
    async def writer(name: str) -> None:
        async with await Store.connect(daemon.socket) as store:
            for n in range(10):
                await store.append("shared", [f"{name}{n}a", f"{name}{n}b"])

    async with anyio.create_task_group() as tg:
        for name in "xyz":
            tg.start_soon(writer, name)
    async with await Store.connect(daemon.socket) as store:
        turns = await store.turns("shared")
    assert len(turns) == 30
    for turn in turns:
        items: list[Any] = turn.items
        assert [i[-1] for i in items] == ["a", "b"] and items[0][:-1] == items[1][:-1]


async def test_a_socket_no_daemon_answers_on_is_named(tmp_path: Path) -> None:
    from ledger.api import DaemonUnreachable

    plain = tmp_path / "not-a-socket"
    plain.touch()
    for where in (tmp_path / "missing.sock", plain):
        with pytest.raises(DaemonUnreachable, match=f"socket {where}") as refused:
            await Store.connect(where)
        assert isinstance(refused.value, ConnectionError)  # an OSError, as it was


async def test_store_connect_speaks_through_the_one_wire_client(daemon: DaemonProcess) -> None:
    """Adapters, brokerctl and the library share `wire.client.BrokerClient`."""
    from wire.client import BrokerClient

    async with await Store.connect(daemon.socket) as store:
        assert isinstance(store.client, BrokerClient)
        await store.append("one-client", ["hi"])
        assert await store.items("one-client") == ["hi"]
