"""The library face on a thread the daemon compacted: a daemon compaction keeps its
newest turns verbatim (the `compactions` row's `first_kept_turn_id`), and the
library reads that thread as the daemon's own context load does
(ledger/reads.py load_thread): the summary, the kept turns, what came after."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from ledger.api import Store, SyncStore
from ledger.port.records import Thread
from ledger.sessions import thread_ids
from tests import ledger_db
from tests.conftest import DaemonFactory
from tests.integration.test_compaction import SMALL, WORDS, chat
from tests.integration.test_fork_export import ctl
from tests.library.daemon_turns import (
    check_reads,
    daemon_compaction,
    daemon_turn,
    daemon_view,
    load,
)


def compacted_view(thread: Thread) -> list[Any]:
    """The thread the daemon's context loads, as library items; it has a summary."""
    assert thread.summary is not None
    return daemon_view(thread)


def chain_length(path: Path, session: str) -> int:
    with contextlib.closing(ledger_db.connect(path)) as conn:
        head = conn.execute(
            "SELECT head_turn_id FROM sessions WHERE label = ?", (session,)
        ).fetchone()[0]
        return len(thread_ids(conn, head))


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_compaction_by_a_real_daemon_reads_as_its_context(
    make_daemon: DaemonFactory,
) -> None:
    d = make_daemon({"engine": {**SMALL, "delay_ms": 1}})
    replies = await chat(d, [f"message {n}: {WORDS}" for n in range(8)])
    session = replies[0]["session"]
    with contextlib.closing(d.db()) as db:
        kept = db.execute(
            "SELECT count(*) FROM compactions WHERE first_kept_turn_id IS NOT NULL"
        ).fetchone()[0]
    assert kept, "a window of 400 tokens with keep_recent_ratio 0.25 keeps turns"
    thread = load(d.ledger, session)
    assert thread.turns, "the daemon's context holds kept turns"
    want = compacted_view(thread)
    async with await Store.connect(d.socket) as remote:
        assert await remote.items(session) == want
        for n in range(1, len(want) + 2):
            assert await remote.last(session, n) == want[-n:], n
        assert [i for t in await remote.turns(session) for i in t.items] == want
    assert d.terminate() == 0
    with SyncStore.open(d.ledger) as store:  # the same file, in this process
        check_reads(store, session, want)


def test_kept_turns_read_before_the_turns_after_the_compaction(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with SyncStore.open(path) as store:
        store.create("s")
    daemon_turn(path, "s", ["q1", "a1"], 1)
    kept = daemon_turn(path, "s", ["q2", "a2"], 2)
    daemon_turn(path, "s", ["q3", "a3"], 3)
    daemon_compaction(path, "s", "q1 and a1", kept, 4)
    with SyncStore.open(path) as store:
        check_reads(store, "s", compacted_view(load(path, "s")))
        assert store.items("s")[1:] == [
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": "a2"},
            {"role": "user", "content": "q3"},
            {"role": "assistant", "content": "a3"},
        ]
        before = compacted_view(load(path, "s"))
        store.append("s", ["after"])
        check_reads(store, "s", [*before, "after"])
        assert [t.type for t in store.turns("s")] == ["compaction", "turn", "turn", "turn"]


def test_a_compaction_keeping_what_an_earlier_one_kept(tmp_path: Path) -> None:
    """The second compaction keeps turns from before the first one (a large
    keep_recent_ratio): the first one's summary is in the second's, and neither
    the daemon's context nor the library shows it again."""
    path = tmp_path / "ledger.db"
    with SyncStore.open(path) as store:
        store.create("s")
    daemon_turn(path, "s", ["q1", "a1"], 1)
    k2 = daemon_turn(path, "s", ["q2", "a2"], 2)
    k3 = daemon_turn(path, "s", ["q3", "a3"], 3)
    daemon_compaction(path, "s", "one", k2, 4)
    daemon_turn(path, "s", ["q4", "a4"], 5)
    daemon_compaction(path, "s", "one, two", k3, 6)
    thread = load(path, "s")
    assert thread.summary == "one, two"
    assert [m[1] for t in thread.turns for m in t.messages] == ["q3", "a3", "q4", "a4"]
    with SyncStore.open(path) as store:
        check_reads(store, "s", compacted_view(thread))
        assert [t.type for t in store.turns("s")] == ["compaction", "turn", "turn"]


def kept_thread(path: Path) -> tuple[str, str]:
    """Session "s": q1/a1 summarized, q2/a2 and q3/a3 kept by a daemon compaction
    at the head; (the second kept turn, the compaction)."""
    with SyncStore.open(path) as store:
        store.create("s")
    daemon_turn(path, "s", ["q1", "a1"], 1)
    kept = daemon_turn(path, "s", ["q2", "a2"], 2)
    last = daemon_turn(path, "s", ["q3", "a3"], 3)
    return last, daemon_compaction(path, "s", "q1 and a1", kept, 4)


def test_a_pop_takes_the_last_kept_item(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    kept_thread(path)
    with SyncStore.open(path) as store:
        before = store.items("s")
        assert store.pop("s") == {"role": "assistant", "content": "a3"}
        assert store.items("s") == before[:-1]
        check_reads(store, "s", compacted_view(load(path, "s")))
        for n in range(4):  # down to the summary, then nothing
            assert store.pop("s") == before[-2 - n]
            assert store.items("s") == before[: -2 - n]
            assert store.get("s").turns == chain_length(path, "s")
        assert store.pop("s") is None and store.items("s") == []
        store.append("s", ["new"])
        assert store.items("s") == ["new"]


def test_a_pop_after_the_compaction_leaves_the_kept_turns(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    kept_thread(path)
    with SyncStore.open(path) as store:
        store.append("s", ["x"])
        before = store.items("s")
        assert store.pop("s") == "x"
        assert store.items("s") == before[:-1]
        assert store.pop("s") == {"role": "assistant", "content": "a3"}
        check_reads(store, "s", compacted_view(load(path, "s")))


def test_a_library_compaction_of_a_thread_kept_by_the_daemon(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    kept_thread(path)
    want = compacted_view(load(path, "s"))
    given: list[Any] = []

    def summarize(items: list[Any]) -> list[Any]:
        given.append(items)
        return ["short"]

    with SyncStore.open(path) as store:
        store.compact("s", summarize)
        assert given == [want]
        assert store.items("s") == ["short"]


@pytest.mark.anyio
async def test_a_library_compaction_through_the_daemon_of_a_thread_it_kept(
    make_daemon: DaemonFactory,
) -> None:
    d = make_daemon()
    assert d.terminate() == 0
    kept_thread(d.ledger)
    d.start()
    async with await Store.connect(d.socket) as remote:
        await remote.compact("s", lambda items: [len(items)])
        assert await remote.items("s") == [5]


def context(thread: Thread) -> tuple[str | None, list[Any]]:
    """What a context load gives the daemon, but for turn ids."""
    return thread.summary, [turn.messages for turn in thread.turns]


def test_an_export_carries_a_daemon_compaction_and_its_kept_turns(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    kept_thread(path)
    with SyncStore.open(path) as store:
        store.append("s", ["after"])
        store.import_jsonl(store.export_jsonl("s"), "copy")
        assert store.items("copy") == store.items("s")
    assert context(load(path, "copy")) == context(load(path, "s"))


def test_an_export_carries_a_library_compaction_and_a_popped_one(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with SyncStore.open(path) as store:
        store.append("s", ["a", "b"])
        store.compact("s", lambda items: ["one", "two"])
        store.import_jsonl(store.export_jsonl("s"), "copy")
        store.pop("s")
        store.import_jsonl(store.export_jsonl("s"), "popped")
    assert context(load(path, "copy")) == ('["one","two"]', [])
    assert context(load(path, "popped")) == context(load(path, "s")) == ('["one"]', [])


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_brokerctl_export_and_import_of_a_compacted_session(
    make_daemon: DaemonFactory, tmp_path: Path
) -> None:
    d = make_daemon({"engine": {**SMALL, "delay_ms": 1}})
    session = (await chat(d, [f"message {n}: {WORDS}" for n in range(8)]))[0]["session"]
    out = tmp_path / "thread.jsonl"
    done = ctl(d, "export", session, "-o", str(out))
    assert done.returncode == 0, done.stderr
    done = ctl(d, "import", str(out), "--label", "import:copy")
    assert done.returncode == 0, done.stderr
    assert d.terminate() == 0
    original = load(d.ledger, session)
    assert original.summary is not None and original.turns
    assert context(load(d.ledger, "import:copy")) == context(original)


def test_an_export_without_compaction_rows_still_imports(tmp_path: Path) -> None:
    """An export made before lines carried `compaction` (ledger/sessions.py)."""
    path = tmp_path / "ledger.db"
    kept_thread(path)
    with SyncStore.open(path) as store:
        lines = [orjson.loads(line) for line in store.export_jsonl("s").splitlines()]
        assert [line.get("compaction", {}).get("first_kept") for line in lines[1:]] == [
            None,
            None,
            None,
            1,
        ]
        for line in lines:
            line.pop("compaction", None)
        old = b"\n".join(orjson.dumps(line) for line in lines)
        copy = store.import_jsonl(old, "old")
        assert copy.turns == 4
        assert store.items("old") == store.items("s")[:1]  # the summary: no row, no kept turns
    assert load(path, "old").summary is None


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"first_kept": 3}, "compaction.first_kept"),
        ({"summarized_through": -1}, "compaction.summarized_through"),
        ({"first_kept": "1"}, "compaction.first_kept"),
        ({"summary": None}, "compaction.summary"),
        ({"trigger": 5}, "compaction.trigger"),
        ({"tokens_before": {"a": 1}}, "a compaction with a bad field"),
    ],
)
def test_a_bad_compaction_line_is_refused_and_nothing_is_written(
    tmp_path: Path, change: dict[str, Any], error: str
) -> None:
    path = tmp_path / "ledger.db"
    kept_thread(path)
    with SyncStore.open(path) as store:
        lines = [orjson.loads(line) for line in store.export_jsonl("s").splitlines()]
        lines[-1]["compaction"].update(change)
        with pytest.raises(ValueError, match=error):
            store.import_jsonl(b"\n".join(orjson.dumps(line) for line in lines), "bad")
        assert [s.id for s in store.list_sessions().sessions] == ["s"]


def test_a_session_with_a_turn_the_daemon_committed_can_be_deleted(tmp_path: Path) -> None:
    """The daemon's commit writes the turn's state record (turn_state), which
    references the turn: found by the store model's delete after a daemon compaction."""
    path = tmp_path / "ledger.db"
    kept_thread(path)
    with SyncStore.open(path) as store:
        store.delete("s")  # raised sqlite3.IntegrityError: FOREIGN KEY constraint failed
        assert store.list_sessions().sessions == []
    with contextlib.closing(ledger_db.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM turn_state").fetchone() == (0,)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_agents_sdk_session_reads_the_kept_turns(tmp_path: Path) -> None:
    pytest.importorskip("agents")
    from ledger.integrations.openai_agents import LedgerSession

    path = tmp_path / "ledger.db"
    kept_thread(path)
    want = compacted_view(load(path, "s"))
    session = LedgerSession("s", path=path)
    try:
        assert await session.get_items() == want
        for n in range(1, len(want) + 1):
            assert await session.get_items(limit=n) == want[-n:]
        assert await session.pop_item() == want[-1]
        assert await session.get_items() == want[:-1]
    finally:
        session.close()
