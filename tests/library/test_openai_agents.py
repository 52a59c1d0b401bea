"""`LedgerSession` as the OpenAI Agents SDK sees it: the Session protocol's calls,
their limits, every kind of item, and one call's items kept together. (The SDK's
own session tests run against it too: docs/integrations.md.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

agents = pytest.importorskip("agents")

from agents.memory import Session, SessionSettings  # noqa: E402

from ledger.api import StoreClosed  # noqa: E402
from ledger.integrations.openai_agents import LedgerSession  # noqa: E402
from tests.harness import DaemonProcess  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

USER = {"role": "user", "content": "What is 2 + 2? ünïcode ✓"}
CALL = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "add",
    "arguments": '{"a": 2, "b": 2}',
    "id": "fc_1",
    "status": "completed",
}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "4"}
REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "add them"}],
    "encrypted_content": None,
}
ANSWER = {
    "type": "message",
    "role": "assistant",
    "id": "msg_1",
    "status": "completed",
    "content": [{"type": "output_text", "text": "4", "annotations": [], "logprobs": []}],
}
TURN = [USER, REASONING, CALL, OUTPUT, ANSWER]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


async def test_it_is_a_session_and_every_item_kind_round_trips(path: Path) -> None:
    session = LedgerSession("chat", path=path)
    assert isinstance(session, Session)
    await session.add_items(TURN)
    assert await session.get_items() == TURN
    assert await session.get_items(limit=2) == [OUTPUT, ANSWER]
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=99) == TURN
    session.close()
    reopened = LedgerSession("chat", path=path)
    assert await reopened.get_items() == TURN
    reopened.close()


async def test_session_settings_limit_and_an_explicit_limit_over_it(path: Path) -> None:
    session = LedgerSession("chat", path=path, session_settings=SessionSettings(limit=2))
    await session.add_items([{"role": "user", "content": str(n)} for n in range(5)])
    assert [i["content"] for i in await session.get_items()] == ["3", "4"]
    assert [i["content"] for i in await session.get_items(limit=4)] == ["1", "2", "3", "4"]
    session.close()


async def test_pop_and_clear(path: Path) -> None:
    session = LedgerSession("chat", path=path)
    assert await session.pop_item() is None
    assert await session.get_items() == []
    await session.clear_session()  # nothing to clear is not an error
    await session.add_items(TURN[:2])
    await session.add_items(TURN[2:])
    assert await session.pop_item() == ANSWER
    assert await session.pop_item() == OUTPUT
    assert await session.get_items() == TURN[:3]
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    session.close()


async def test_sessions_of_one_file_are_apart_and_share_its_writer(path: Path) -> None:
    one, two = LedgerSession("one", path=path), LedgerSession("two", path=path)
    await one.add_items([USER])
    await two.add_items([ANSWER])
    assert await one.get_items() == [USER] and await two.get_items() == [ANSWER]
    assert await one.pop_item() == USER
    assert await two.get_items() == [ANSWER]
    one.close()
    two.close()


async def test_concurrent_add_items_keep_each_call_together(path: Path) -> None:
    session = LedgerSession("busy", path=path)

    async def run(name: str) -> None:
        for n in range(10):
            await session.add_items([{"role": "user", "content": f"{name}{n}"}, ANSWER])

    async with anyio.create_task_group() as tg:
        for name in "abcde":
            tg.start_soon(run, name)
    items = await session.get_items()
    assert len(items) == 100
    for pair in zip(items[::2], items[1::2], strict=True):
        assert pair[0]["role"] == "user" and pair[1] == ANSWER
    session.close()


async def test_an_unserializable_item_stores_nothing(path: Path) -> None:
    session = LedgerSession("chat", path=path)
    await session.add_items([USER])
    bad: dict[str, Any] = {"role": "user", "content": b"bytes are not JSON"}
    with pytest.raises(TypeError, match=r"item 1 \(dict"):
        await session.add_items([ANSWER, bad])
    assert await session.get_items() == [USER]
    session.close()


async def test_a_closed_session_refuses_every_call(path: Path) -> None:
    session = LedgerSession("chat", path=path)
    session.close()
    with pytest.raises(StoreClosed):
        await session.add_items([])
    with pytest.raises(RuntimeError):
        await session.get_items()
    # The calls that go to the local Store directly refuse as well.
    with pytest.raises(StoreClosed):
        await session.add_items([USER])
    with pytest.raises(StoreClosed):
        await session.get_items(3)


async def test_through_a_daemon_socket(daemon: DaemonProcess) -> None:
    session = LedgerSession("remote-chat", socket=daemon.socket)
    assert await session.get_items() == []
    await session.add_items(TURN)
    assert await session.get_items(limit=2) == [OUTPUT, ANSWER]
    assert await session.pop_item() == ANSWER
    with pytest.raises(TypeError, match="item 0"):
        await session.add_items([object()])
    assert await session.get_items() == TURN[:-1]
    await session.clear_session()
    assert await session.get_items() == []
    session.close()
    with pytest.raises(StoreClosed):
        await session.get_items()


async def test_path_or_socket_but_not_both(path: Path) -> None:
    with pytest.raises(ValueError, match="either path"):
        LedgerSession("x", path=path, socket="/run/x.sock")
    with pytest.raises(ValueError, match="either path"):
        LedgerSession("x")
