"""The append's own path: three statements a turn (writes.py) and the
full-text index asked about only when it may be due (engine.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from ledger.api import NotFound, Store
from ledger.api.engine import ALONE_PASSES, FTS_LAG, IndexWhenDue
from tests import ledger_db

pytestmark = pytest.mark.anyio


def _rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with ledger_db.connect(path) as conn:
        return conn.execute(sql).fetchall()


async def test_appends_chain_their_turns_and_count_them(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    async with await Store.open(path) as store:
        first = await store.append("s", ["a", "b"])
        second = await store.append("s", ["c"])
        info = await store.get("s")
        assert (info.turns, info.head_turn) == (2, second)
        assert await store.items("s") == ["a", "b", "c"]
        with pytest.raises(NotFound):
            await store.append("ghost", ["x"], create=False)
    parents = {row[0]: row[1] for row in _rows(path, "SELECT id, parent_id FROM turns")}
    assert parents == {first: None, second: first}  # the refused append left no turn
    assert _rows(path, "SELECT count(*) FROM sessions WHERE label = 'ghost'") == [(0,)]


async def test_the_index_never_lags_fts_lag_messages(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    async with await Store.open(path) as store:
        lags: list[int] = []
        for n in range(FTS_LAG):  # two messages a turn: FTS_LAG turns index twice over
            await store.append("s", [{"role": "user", "content": f"w{n}"}, "answer"])
            [(lag,)] = _rows(
                path, "SELECT (SELECT max(id) FROM messages) - indexed_through FROM fts_progress"
            )
            assert isinstance(lag, int)
            lags.append(lag)
    assert max(lags) < FTS_LAG
    assert lags.count(0) >= 2  # it did index, more than once


@pytest.mark.parametrize("count", [1, 2, 9, 20])
async def test_a_turn_of_any_size_keeps_its_items_in_order(tmp_path: Path, count: int) -> None:
    path = tmp_path / "ledger.db"
    items = [{"role": "user", "content": f"m{n}"} if n % 2 else [n, None] for n in range(count)]
    async with await Store.open(path) as store:
        first = await store.append("s", items)
        await store.append("s", ["after"])
        assert await store.items("s") == [*items, "after"]
    rows = _rows(path, f"SELECT seq, role, created_at FROM messages WHERE turn_id = '{first}'")
    assert [r[0] for r in rows] == list(range(count))  # in id order too
    assert [r[1] for r in rows] == ["user" if n % 2 else "item" for n in range(count)]
    assert len({r[2] for r in rows}) == 1


async def test_usage_is_stored_and_its_absence_is_null(tmp_path: Path) -> None:
    # writes.py: without usage the statement says NULL, with it binds the ints.
    path = tmp_path / "ledger.db"
    async with await Store.open(path) as store:
        bare = await store.append("s", ["a"])
        counted = await store.append("s", ["b"], usage=(3, 4))
        half = await store.append("s", ["c"], usage=(5, None))
    tokens = {
        row[0]: row[1:]
        for row in _rows(path, "SELECT id, prompt_tokens, completion_tokens, engine FROM turns")
    }
    assert tokens == {
        bare: (None, None, "library"),
        counted: (3, 4, "library"),
        half: (5, None, "library"),
    }


def _bare_ledger() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, content TEXT NOT NULL);"
        "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content = 'messages',"
        " content_rowid = 'id');"
        "CREATE TABLE fts_progress (only_row INTEGER PRIMARY KEY, indexed_through INTEGER);"
        "INSERT INTO fts_progress VALUES (1, 0);"
    )
    return conn


def _write(conn: sqlite3.Connection, n: int) -> None:
    conn.executemany("INSERT INTO messages (content) VALUES (?)", [("word",)] * n)


def _waiting(conn: sqlite3.Connection) -> int:
    row = conn.execute(
        "SELECT (SELECT max(id) FROM messages) - indexed_through FROM fts_progress"
    ).fetchone()
    return int(row[0])


def test_the_index_is_asked_for_once_the_changes_may_reach_the_lag() -> None:
    conn, due = _bare_ledger(), IndexWhenDue()
    _write(conn, FTS_LAG - 1)
    assert due(conn) == 0  # asked: FTS_LAG - 1 wait, not due yet
    _write(conn, 1)
    assert due(conn) == FTS_LAG
    assert _waiting(conn) == 0


def test_after_a_rollback_the_index_is_asked_for_at_the_next_commit() -> None:
    conn, due = _bare_ledger(), IndexWhenDue()
    _write(conn, 200)
    assert due(conn) == 0  # 200 committed, waiting
    conn.execute("BEGIN")
    _write(conn, 100)
    assert due(conn) == 300  # indexed in the transaction that then rolls back
    conn.execute("ROLLBACK")
    due.forget()  # what the Transactor's rollback hook does
    _write(conn, 60)
    assert due(conn) == 260  # without forget, 60 changes since its answer would not ask
    assert _waiting(conn) == 0


async def _appending_together(store: Store, tasks: int, rounds: int, prefix: str) -> None:
    async def caller(n: int) -> None:
        for turn in range(rounds):
            await store.append(f"{prefix}{n}", [turn])

    async with anyio.create_task_group() as tg:
        for n in range(tasks):
            tg.start_soon(caller, n)
    for n in range(tasks):
        assert await store.items(f"{prefix}{n}") == list(range(rounds))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_one_pass_of_appends_is_one_transaction_committed_by_its_first_task(
    tmp_path: Path,
) -> None:
    async with await Store.open(tmp_path / "ledger.db") as store:
        writer = store._live().writer
        await _appending_together(store, 40, 5, "s")
        # Each pass's 40 appends are one transaction: five rounds, five batches
        # (one more when a task starts a pass later than the others).
        assert writer.jobs == 200
        assert writer.batches <= 10


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_appends_one_after_another_let_the_pass_run_once_in_alone_passes(
    tmp_path: Path,
) -> None:
    # engine.py: alone, an append commits without a pass of the loop, and
    # every ALONE_PASSES-th lets it run; a callback waiting for the loop gets it.
    import asyncio

    async with await Store.open(tmp_path / "ledger.db") as store:
        writer = store._live().writer
        loop = asyncio.get_running_loop()
        passes, ran_at = 0, []
        run_once = loop._run_once  # type: ignore[attr-defined]

        def counted() -> None:
            nonlocal passes
            passes += 1
            run_once()

        loop._run_once = counted  # type: ignore[attr-defined]
        try:
            for n in range(2 * ALONE_PASSES + 4):
                if n == 1:  # scheduled while the appends commit alone: waits for a pass
                    loop.call_soon(lambda: ran_at.append(writer.jobs))
                await store.append("seq", [n])
        finally:
            del loop._run_once  # type: ignore[attr-defined]
        assert passes == 3  # the 1st, 17th and 33rd appends let the pass run
        assert writer.batches == writer.jobs == 2 * ALONE_PASSES + 4
        assert ran_at == [ALONE_PASSES]  # in the 17th append's pass, before its commit

        # Tasks that start appending together after that: those that find a run of
        # lone batches commit alone until one lets the pass run; then they are
        # gathered again.
        await _appending_together(store, 40, 5, "t")
        assert writer.jobs == 2 * ALONE_PASSES + 4 + 200
        assert writer.batches - (2 * ALONE_PASSES + 4) <= ALONE_PASSES + 10


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_first_task_cancelled_while_the_pass_gathers_commits_the_others(
    tmp_path: Path,
) -> None:
    import asyncio

    async with await Store.open(tmp_path / "ledger.db") as store:
        leader = asyncio.ensure_future(store.append("lead", ["first"]))
        follower = asyncio.ensure_future(store.append("follow", ["second"]))
        await asyncio.sleep(0)  # both handed over their job: the leader lets the pass run
        leader.cancel()
        with anyio.fail_after(5):
            turn = await follower
            with pytest.raises(asyncio.CancelledError):
                await leader
        assert (await store.get("follow")).head_turn == turn
        # Cancelled while it waited, the leader's own append committed all the same
        # (waiting.py): nothing handed to the writer is taken back.
        assert await store.items("lead") == ["first"]


def test_a_first_task_whose_loop_closes_under_it_commits_and_leaves_the_store_working(
    tmp_path: Path,
) -> None:
    import asyncio
    import gc

    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(Store.open(tmp_path / "ledger.db"))

    followers: list[asyncio.Future[str]] = []

    async def start_two() -> None:
        asyncio.ensure_future(store.append("lead", ["first"]))  # noqa: RUF006 - to be collected
        followers.append(asyncio.ensure_future(store.append("follow", ["second"])))
        await asyncio.sleep(0)  # the first leads its pass and waits for the loop to resume it
        loop.stop()  # it never will: the leader is closed when collected, its follower kept

    starting = loop.create_task(start_two())
    loop.run_forever()
    assert starting.done()
    loop.close()
    gc.collect()

    async def after() -> tuple[list[object], list[object], list[object]]:
        await store.append("later", ["third"])
        return await store.items("lead"), await store.items("follow"), await store.items("later")

    try:
        # Neither caller was told (their loop is gone), yet the batch committed, and
        # a follower's closed loop did not fail the Store's writer.
        assert asyncio.run(after()) == (["first"], ["second"], ["third"])
    finally:
        store._close()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_first_task_whose_batch_goes_to_the_writer_thread_waits_for_its_commit(
    tmp_path: Path,
) -> None:
    # Its ticket is not done when the lead returns, so it makes its future then
    # (waiting.py) and the writer thread's delivery wakes it.
    import asyncio

    async with await Store.open(tmp_path / "ledger.db") as store:
        writer = store._live().writer
        catching_up = writer._checkpoint_lock
        catching_up.acquire()  # as a checkpoint catching up holds it (engine.py)
        try:
            append = asyncio.ensure_future(store.append("s", ["x"]))
            await asyncio.sleep(0.05)
            assert not append.done()  # the writer thread has it, blocked on the lock
        finally:
            catching_up.release()
        with anyio.fail_after(5):
            turn = await append
        assert (await store.get("s")).head_turn == turn
        assert writer.batches == 1
