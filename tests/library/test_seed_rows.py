"""The library's memory store, turn metadata and token-bounded recent reads (seeds 001
and 004), on asyncio and trio, and blocking."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.api import Store, SyncStore
from ledger.api.records import estimate_tokens, within_tokens
from ledger.migrations import __path__ as migrations_path
from tests import ledger_db
from tests.harness import DaemonProcess

pytestmark = pytest.mark.anyio
MIGRATIONS = len(list(Path(migrations_path[0]).glob("[0-9]*.sql")))


async def test_a_memory_store_has_the_whole_api_and_leaves_nothing(tmp_path: Path) -> None:
    store = await Store.memory()
    path = Path(store.path)
    assert path.parent.parent == Path("/dev/shm")  # RAM, on this machine
    turn = await store.append(
        "chat", [{"role": "user", "content": "hi"}], usage=(3, 1), metadata={"source": "cli"}
    )
    await store.append("chat", [{"role": "assistant", "content": "hello"}])
    [first, second] = await store.turns("chat")
    assert (first.id, first.metadata, first.prompt_tokens) == (turn, {"source": "cli"}, 3)
    assert second.metadata is None
    fork = await store.fork(turn, "branch")
    assert await store.items(fork.id) == [{"role": "user", "content": "hi"}]
    with ledger_db.connect(path) as conn:  # the same schema as a file's, every migration
        (version,) = conn.execute("PRAGMA user_version").fetchone()
    assert version == MIGRATIONS
    other = await Store.memory()
    assert other.path != store.path  # each memory store is a ledger of its own
    assert (await other.list_sessions()).sessions == []
    await other.aclose()
    await store.aclose()
    assert not path.parent.exists()


def test_a_blocking_memory_store_too() -> None:
    with SyncStore.memory() as store:
        folder = Path(store.path).parent
        store.append("s", [{"role": "user", "content": "one"}], metadata={"n": 1})
        assert [t.metadata for t in store.turns("s")] == [{"n": 1}]
        assert store.recent("s", max_tokens=0) == []
    assert not folder.exists()


async def test_metadata_must_be_a_json_object_and_a_refusal_stores_nothing() -> None:
    async with await Store.memory() as store:
        with pytest.raises(TypeError, match="metadata must be a dict"):
            await store.append("s", ["x"], metadata=["not", "a", "dict"])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not JSON-serializable"):
            await store.append("s", ["x"], metadata={"when": object()})
        assert (await store.list_sessions()).sessions == []


async def test_recent_reads_keep_to_a_token_bound() -> None:
    async with await Store.memory() as store:
        for n in range(10):
            await store.append("s", [{"role": "user", "content": "x" * (4 * (n + 1))}])
        everything = await store.recent("s", 30)
        assert len(everything) == 10
        # Item n costs n + 1 tokens by the estimate: 10 + 9 + 8 = 27 fit in 29, not 7 more.
        bounded = await store.recent("s", 30, max_tokens=29)
        assert bounded == everything[-3:]
        assert await store.recent("s", 2, max_tokens=1000) == everything[-2:]
        assert await store.recent("s", 30, max_tokens=100, count=lambda item: 50) == everything[-2:]
        assert await store.recent("s", 30, max_tokens=9) == []  # the newest alone is 10


def test_the_bound_is_a_suffix_and_never_over() -> None:
    items = [{"content": "a" * k} for k in (1, 40, 3, 4, 8)]
    costs = [estimate_tokens(i) for i in items]
    for bound in range(0, sum(costs) + 2):
        kept = within_tokens(items, bound, None)
        assert kept == items[len(items) - len(kept) :]
        assert sum(estimate_tokens(i) for i in kept) <= bound
    with pytest.raises(ValueError, match="max_tokens"):
        within_tokens(items, -1, None)


async def test_metadata_and_recent_through_a_daemon(daemon: DaemonProcess) -> None:
    async with await Store.connect(daemon.socket) as store:
        turn = await store.append("chat", ["one"], metadata={"by": "remote"})
        await store.append("chat", ["two, longer"])
        [first, second] = await store.turns("chat")
        assert (first.id, first.metadata, second.metadata) == (turn, {"by": "remote"}, None)
        assert await store.recent("chat", 5, max_tokens=4) == ["two, longer"]  # 13 chars
        with pytest.raises(TypeError, match="metadata must be a dict"):
            await store.append("chat", ["x"], metadata="no")  # type: ignore[arg-type]
        assert len(await store.turns("chat")) == 2
