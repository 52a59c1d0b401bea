"""The library Store in this process: sessions, items, turns, forks, compaction,
export and import, on asyncio and trio (tests/conftest.py `anyio_backend`)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import pytest

from ledger.api import Conflict, NotFound, Store, SyncStore, writes
from tests import ledger_db

pytestmark = pytest.mark.anyio

ITEMS: list[Any] = [
    {"role": "user", "content": "héllo ✓ 日本", "type": "message"},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": [1, 2.5]}'},
    {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    {"type": "reasoning", "id": "r1", "summary": [{"type": "summary_text", "text": "t"}]},
    {"nested": {"a": [None, True, False, 0, -1, 1.25e300, "x" * 1000]}},
    "a bare string",
    42,
    None,
    ["a", "list"],
]


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    s = await Store.open(tmp_path / "ledger.db")
    yield s
    await s.aclose()


async def test_items_round_trip_exactly(store: Store) -> None:
    turn = await store.append("s", ITEMS[:4])
    await store.append("s", ITEMS[4:])
    assert await store.items("s") == ITEMS
    assert await store.last("s", 3) == ITEMS[-3:]
    assert await store.last("s", 100) == ITEMS
    assert await store.last("s", 0) == []
    assert await store.items("s", 2, 5) == ITEMS[2:5]
    turns = await store.turns("s")
    assert turns[0].id == turn
    assert [t.items for t in turns] == [ITEMS[:4], ITEMS[4:]]


async def test_what_a_read_returns_is_a_copy_the_caller_may_change(store: Store) -> None:
    # Each read decodes fresh objects: changing what a read returned, or what was
    # handed to append or create, changes nothing stored.
    given: list[Any] = [{"role": "user", "content": "hi", "parts": [1, 2]}, ["a", "b"]]
    await store.append("s", given)
    await store.create("m", title="T", metadata={"tags": ["x"], "n": {"deep": 1}})
    stored = [{"role": "user", "content": "hi", "parts": [1, 2]}, ["a", "b"]]
    given[0]["content"] = "changed after the append"
    given.append("added after the append")

    items = await store.items("s")
    items[0]["parts"].append(3)
    items[1][0] = "mutated"
    items.append("more")
    last = await store.last("s", 2)
    last[0]["content"] = "mutated"
    turns = await store.turns("s")
    turns[0].items[0]["role"] = "mutated"
    turns[0].items.clear()
    got = await store.get("m")
    got.metadata["tags"].append("y")
    got.metadata["n"]["deep"] = 2
    listed = (await store.list_sessions()).sessions
    next(info for info in listed if info.id == "m").metadata.clear()

    assert await store.items("s") == stored
    assert await store.last("s", 2) == stored
    assert [t.items for t in await store.turns("s")] == [stored]
    assert (await store.get("m")).metadata == {"tags": ["x"], "n": {"deep": 1}}
    page = await store.list_sessions()
    assert next(i for i in page.sessions if i.id == "m").metadata == {
        "tags": ["x"],
        "n": {"deep": 1},
    }


async def test_two_tasks_appending_to_one_session_never_interleave(store: Store) -> None:
    async def writer(name: str) -> None:
        for n in range(10):
            await store.append("shared", [f"{name}:{n}:{part}" for part in range(3)])

    async with anyio.create_task_group() as tg:
        for name in ("a", "b", "c", "d"):
            tg.start_soon(writer, name)
    turns = await store.turns("shared")
    assert len(turns) == 40
    seen: dict[str, int] = {}
    for turn in turns:
        names = {item.split(":")[0] for item in turn.items}
        counts = {item.split(":")[1] for item in turn.items}
        assert len(names) == 1 and len(counts) == 1  # one call's items, together
        assert [item.split(":")[2] for item in turn.items] == ["0", "1", "2"]
        name, n = names.pop(), int(counts.pop())
        assert n == seen.get(name, -1) + 1  # each writer's calls in its own order
        seen[name] = n
    assert (await store.get("shared")).turns == 40


async def test_sessions_create_get_list_title_put_delete(store: Store) -> None:
    made = await store.create("s1", title="First chat", metadata={"user": "u1"})
    assert (made.id, made.title, made.metadata, made.turns) == (
        "s1",
        "First chat",
        {"user": "u1"},
        0,
    )
    with pytest.raises(Conflict):
        await store.create("s1")
    with pytest.raises(NotFound) as missing:
        await store.get("nope")
    assert missing.value.field == "session"
    generated = await store.create(title="second")
    assert generated.id.startswith("lib:")
    for n in range(5):
        await store.append(f"p{n}", [n])
    page = await store.list_sessions(limit=3)
    assert [s.id for s in page.sessions] == [generated.id, "p0", "p1"]
    rest = await store.list_sessions(limit=10, cursor=page.next_cursor)
    assert [s.id for s in rest.sessions] == ["p2", "p3", "p4", "s1"] and rest.next_cursor is None
    assert [s.id for s in (await store.list_sessions(title_contains="FIRST")).sessions] == ["s1"]
    await store.set_title("s1", "Renamed")
    assert (await store.get("s1")).title == "Renamed"
    await store.append("s1", ["old"])
    replaced = await store.put("s1", [["a", "b"], ["c"]])
    assert await store.items("s1") == ["a", "b", "c"] and replaced.turns == 2
    await store.delete("s1")
    with pytest.raises(NotFound):
        await store.get("s1")
    with pytest.raises(NotFound):
        await store.delete("s1")


async def test_pop_and_clear(store: Store) -> None:
    await store.append("s", ["a", "b"])
    await store.append("s", ["c"])
    assert await store.pop("s") == "c"
    assert await store.pop("s") == "b"
    assert await store.items("s") == ["a"]
    await store.append("s", ["d"])
    assert await store.items("s") == ["a", "d"]
    await store.clear("s")
    assert await store.items("s") == [] and await store.pop("s") is None
    assert (await store.get("s")).turns == 0


async def test_fork_shares_the_prefix_and_blocks_delete(store: Store) -> None:
    first = await store.append("s", ["a"])
    await store.append("s", ["b"])
    fork = await store.fork(first, "s-fork")
    await store.append("s-fork", ["x"])
    assert await store.items("s-fork") == ["a", "x"]
    assert await store.items("s") == ["a", "b"]
    assert await store.last("s-fork", 1) == ["x"]
    assert fork.parent_session == "s" and fork.parent_turn == first
    with pytest.raises(Conflict, match="s-fork"):
        await store.delete("s")
    await store.delete("s-fork")
    await store.delete("s")
    with pytest.raises(NotFound):
        await store.fork(first)


async def test_compact_replaces_what_the_thread_reads(store: Store) -> None:
    for n in range(4):
        await store.append("s", [f"m{n}"])

    async def summarize(items: list[Any]) -> list[Any]:
        return [{"role": "system", "content": "summary of " + ",".join(items)}]

    await store.compact("s", summarize)
    await store.append("s", ["after"])
    assert await store.items("s") == [
        {"role": "system", "content": "summary of m0,m1,m2,m3"},
        "after",
    ]
    assert await store.last("s", 10) == await store.items("s")


async def test_export_then_import_is_a_copy(store: Store) -> None:
    await store.create("s", title="t")
    await store.append("s", ITEMS[:3])
    await store.append("s", ITEMS[3:])
    data = await store.export_jsonl("s")
    copy = await store.import_jsonl(data, "copy")
    assert copy.id == "copy" and copy.turns == 2
    assert await store.items("copy") == ITEMS
    with pytest.raises(Conflict):
        await store.import_jsonl(data, "copy")


async def test_an_unserializable_item_stores_nothing_of_its_call(store: Store) -> None:
    await store.append("s", ["kept"])
    with pytest.raises(TypeError, match=r"item 1 \(object"):
        await store.append("s", ["fine", object(), "also fine"])
    with pytest.raises(TypeError, match="item 0"):
        await store.put("s", [[{1, 2}]])
    assert await store.items("s") == ["kept"] and (await store.get("s")).turns == 1
    with pytest.raises(TypeError, match="items must be a list"):
        await store.append("s", "not a list")


async def test_append_to_a_missing_session_without_create(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.append("ghost", ["x"], create=False)
    with pytest.raises(NotFound):
        await store.last("ghost", 5)


async def test_two_stores_of_one_file_share_its_writer(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    async with await Store.open(path) as one, await Store.open(path) as two:
        await one.append("s", ["from one"])
        await two.append("s", ["from two"])
        assert await one.items("s") == ["from one", "from two"]
    async with await Store.open(path) as again:  # reopened after both closed
        assert await again.items("s") == ["from one", "from two"]


def test_sync_store_from_blocking_code(tmp_path: Path) -> None:
    with SyncStore.open(tmp_path / "ledger.db") as store:
        turn = store.append("s", [{"role": "user", "content": "hi"}])
        assert store.last("s", 1) == [{"role": "user", "content": "hi"}]
        assert store.pop("s") == {"role": "user", "content": "hi"}
        assert store.fork(turn, "f").parent_turn == turn
        assert [s.id for s in store.list_sessions().sessions] == ["f", "s"]


async def test_the_full_text_index_is_whole_once_the_store_closes(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    store = await Store.open(path)
    await store.append("s", [{"role": "user", "content": "zebra crossing"}])
    await store.aclose()

    with ledger_db.connect(path) as conn:
        hits = conn.execute(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'zebra'"
        ).fetchone()[0]
        through = conn.execute("SELECT indexed_through FROM fts_progress").fetchone()[0]
        newest = conn.execute("SELECT max(id) FROM messages").fetchone()[0]
    assert hits == 1 and through == newest


async def test_last_n_of_one_item_turns_and_of_a_short_thread(store: Store) -> None:
    for n in range(10):
        await store.append("singles", [n])
    assert await store.last("singles", 6) == [4, 5, 6, 7, 8, 9]
    assert await store.last("singles", 50) == list(range(10))
    await store.append("short", ["a", "b", "c"])
    assert await store.last("short", 2) == ["b", "c"]
    assert await store.last("short", 30) == ["a", "b", "c"]


async def test_a_writer_thread_that_fails_fails_its_callers_instead_of_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.api import StoreClosed
    from ledger.port.errors import WriterDied

    store = await Store.open(tmp_path / "ledger.db")
    writer = store._live().writer

    def broken(jobs: list[Any]) -> list[Any]:
        raise RuntimeError("a bug in the writer")

    monkeypatch.setattr(writer._transactor, "execute", broken)
    with pytest.raises(WriterDied, match="a bug in the writer"), anyio.fail_after(5):
        await store.append("s", ["x"])
    with pytest.raises(StoreClosed):
        await store.append("s", ["y"])
    monkeypatch.undo()
    await store.aclose()


async def test_appends_made_at_once_commit_together_and_all_land(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "ledger.db")
    writer = store._live().writer

    async def caller(n: int) -> None:
        for turn in range(5):
            await store.append(f"s{n}", [{"n": n, "turn": turn}])

    async with anyio.create_task_group() as tg:
        for n in range(40):
            tg.start_soon(caller, n)
    for n in range(40):
        assert await store.items(f"s{n}") == [{"n": n, "turn": t} for t in range(5)]
    assert writer.jobs == 200
    # 40 tasks awaiting their own append: a transaction takes many of them (group
    # commit), on the loop's thread (asyncio) or on the writer's (trio).
    assert writer.batches <= 40
    await store.aclose()


async def test_an_append_while_the_writer_is_busy_waits_and_then_lands(
    tmp_path: Path,
) -> None:
    store = await Store.open(tmp_path / "ledger.db")
    writer = store._live().writer
    landed = anyio.Event()

    async def append() -> None:
        await store.append("s", ["queued"])
        landed.set()

    # Someone else's transaction under way (the lock a batch holds, on whichever
    # thread): an append must neither run beside it nor be lost, only wait.
    writer._busy.acquire()
    busy = True
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(append)
            await anyio.sleep(0.05)
            assert not landed.is_set()
            assert not await _exists(store, "s")
            writer._busy.release()
            busy = False
            with anyio.fail_after(5):
                await landed.wait()
    finally:
        if busy:
            writer._busy.release()
    assert await store.items("s") == ["queued"]
    await store.aclose()


async def _exists(store: Store, session: str) -> bool:
    try:
        await store.get(session)
    except NotFound:
        return False
    return True


async def test_closing_while_tasks_append_keeps_every_append_that_returned(
    tmp_path: Path,
) -> None:
    from ledger.api import StoreClosed

    store = await Store.open(tmp_path / "ledger.db")
    returned: dict[str, list[int]] = {}

    async def caller(n: int) -> None:
        for turn in range(1000):
            try:
                await store.append(f"s{n}", [turn])
            except StoreClosed:
                return
            returned.setdefault(f"s{n}", []).append(turn)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for n in range(20):
                tg.start_soon(caller, n)
            await anyio.sleep(0.05)
            await store.aclose()
    assert returned  # some appends returned before the close
    again = await Store.open(tmp_path / "ledger.db")
    for session, turns in returned.items():
        stored = await again.items(session)
        # Every append that returned is there, in order; one that raised may be
        # there too (a job handed over runs: waiting.py), never another.
        assert stored[: len(turns)] == turns
        assert stored == list(range(len(stored)))
    await again.aclose()


def test_a_session_a_route_binding_points_at_is_not_deleted(tmp_path: Path) -> None:
    """A binding (a person's /fork or /switch) sends a conversation's messages to the
    session: deleting it under the daemon would break that route, so it is refused,
    clearly, and nothing changes."""
    path = tmp_path / "ledger.db"
    with SyncStore.open(path) as store:
        store.append("s", ["kept"])
    with contextlib.closing(ledger_db.connect(path)) as conn, conn:
        conn.execute(
            "INSERT INTO route_bindings (channel, peer_kind, peer_id, session_label, bound_by,"
            " created_at) VALUES ('chat', 'dm', 'alice', 's', 'fork', 0)"
        )
    with SyncStore.open(path) as store:
        with pytest.raises(Conflict, match="route_bindings"):
            store.delete("s")
        assert store.items("s") == ["kept"]


def test_delete_handles_every_table_that_refers_to_a_session_or_a_turn(tmp_path: Path) -> None:
    """Each table with a foreign key to `sessions` or `turns` is either cleared by a
    library delete or makes it refuse (writes.py): a table added later and
    forgotten there would fail a delete on its foreign key instead."""
    path = tmp_path / "ledger.db"
    with SyncStore.open(path):
        pass
    with contextlib.closing(ledger_db.connect(path)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        referring = {
            table
            for table in tables
            for fk in conn.execute(f"PRAGMA foreign_key_list('{table}')")
            if fk[2] in ("sessions", "turns") and table not in ("sessions", "turns")
        }
    handled = {*writes.DELETED_BY_TURN, *writes.DELETED_BEFORE_TURNS, *writes.DELETED_BY_SESSION}
    assert referring - handled - set(writes.DAEMON_TABLES) == set()
