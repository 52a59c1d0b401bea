"""Sessions that end, in the library: `end` closes a session with its summary, and
every later write to it raises `SessionEnded` and stores nothing, for `Store` (on
asyncio and trio), `SyncStore` and `Store.connect` (a real daemon)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from ledger.api import Conflict, NotFound, SessionEnded, Store, SyncStore
from tests import ledger_db
from tests.harness import DaemonProcess

pytestmark = pytest.mark.anyio


async def test_an_ended_session_refuses_every_write(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "ledger.db") as store:
        await store.append("s", [{"role": "user", "content": "hi"}])
        ended = await store.end("s", "said hello")
        assert ended.status == "closed"
        before = (await store.items("s"), await store.turns("s"))
        with pytest.raises(SessionEnded, match="'s' ended"):
            await store.append("s", [{"role": "user", "content": "more"}])
        with pytest.raises(SessionEnded):
            await store.append("s", ["x"], create=False)
        with pytest.raises(SessionEnded):
            await store.pop("s")
        with pytest.raises(SessionEnded):
            await store.clear("s")
        with pytest.raises(SessionEnded):
            await store.put("s", [["y"]])
        with pytest.raises(SessionEnded):
            await store.compact("s", lambda items: ["summary"])
        assert (await store.items("s"), await store.turns("s")) == before
        await store.append("other", ["still fine"])  # another session is untouched
        assert await store.items("other") == ["still fine"]


async def test_end_twice_or_of_nothing_raises(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "ledger.db") as store:
        with pytest.raises(NotFound):
            await store.end("nobody")
        await store.append("s", ["a"])
        await store.end("s")
        with pytest.raises(SessionEnded):
            await store.end("s", "again")
        assert issubclass(SessionEnded, Conflict)


def test_sync_store_ends_too(tmp_path: Path) -> None:
    store = SyncStore.open(tmp_path / "ledger.db")
    try:
        store.append("s", [{"role": "user", "content": "plan the trip"}])
        info = store.end("s")
        assert info.status == "closed"
        with pytest.raises(SessionEnded):
            store.append("s", ["late"])
        assert store.items("s") == [{"role": "user", "content": "plan the trip"}]
    finally:
        store.close()


async def test_the_summary_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    async with await Store.open(path) as store:
        await store.append("s", ["a"])
        await store.end("s", "all done")

    def read() -> Any:

        with ledger_db.connect(path) as conn:
            return conn.execute(
                "SELECT status, closing_summary, ended_at IS NOT NULL FROM sessions"
                " WHERE label = 's'"
            ).fetchone()

    assert await anyio.to_thread.run_sync(read) == ("closed", "all done", 1)


async def test_through_a_daemon_an_ended_session_refuses_too(daemon: DaemonProcess) -> None:
    async with await Store.connect(daemon.socket) as store:
        await store.append("chat", ["hi"])
        ended = await store.end("chat", "said hi")
        assert ended.status == "closed"
        with pytest.raises(SessionEnded, match="ended"):
            await store.append("chat", ["more"])
        with pytest.raises(SessionEnded):
            await store.end("chat")
        with pytest.raises(NotFound):
            await store.end("ghost")
        assert await store.items("chat") == ["hi"]
