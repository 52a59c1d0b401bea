"""What `Store.append(usage=...)` keeps comes back: each turn's usage from the
reads, and the session's running totals, in this process and through a
daemon; `LedgerSession.store` is a property, as ADK's `service.store`."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.api import Store, StoreClosed
from tests.harness import DaemonProcess

pytestmark = pytest.mark.anyio


async def check_usage(store: Store) -> None:
    await store.append("chat", ["no usage"])
    await store.append("chat", ["hi"], usage=(30, 4))
    await store.append("chat", ["more"], usage=(12, None))
    turns = await store.turns("chat")
    assert [(t.prompt_tokens, t.completion_tokens) for t in turns] == [
        (None, None),
        (30, 4),
        (12, None),
    ]
    session = await store.get("chat")
    assert (session.prompt_tokens, session.completion_tokens) == (42, 4)
    [listed] = (await store.list_sessions()).sessions
    assert (listed.prompt_tokens, listed.completion_tokens) == (42, 4)
    await store.append("new", ["first"], usage=(5, 6))  # a session the append creates
    made = await store.get("new")
    assert (made.prompt_tokens, made.completion_tokens) == (5, 6)


async def test_usage_comes_back_and_the_totals_are_kept(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "ledger.db") as store:
        await check_usage(store)


async def test_usage_comes_back_through_a_daemon(daemon: DaemonProcess) -> None:
    async with await Store.connect(daemon.socket) as store:
        await check_usage(store)  # type: ignore[arg-type]  # a RemoteStore, the same calls


async def test_ledger_session_store_is_a_property(tmp_path: Path) -> None:
    pytest.importorskip("agents")
    from ledger.integrations.openai_agents import LedgerSession

    session = LedgerSession("chat", path=tmp_path / "ledger.db")
    await session.add_items([{"role": "user", "content": "hi"}])
    store = session.store
    assert isinstance(store, Store)
    assert await store.items("chat") == [{"role": "user", "content": "hi"}]
    session.close()
    with pytest.raises(StoreClosed):
        _ = session.store
