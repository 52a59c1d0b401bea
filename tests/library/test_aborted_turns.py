"""The library face on a thread holding a turn the daemon aborted (an interrupt, or a
crash `recover_crashed` cleans up): its inputs run again in a later turn, so the
daemon's context load leaves them out and keeps the partial reply (ledger/reads.py);
the library reads, pops, compacts and exports that thread as the daemon's
context loads it (issue 22: items round-trip exactly)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from ledger.api import Store, SyncStore
from tests.conftest import DaemonFactory
from tests.integration.test_crash_events import ENGINE
from tests.integration.wire import Adapter
from tests.library.daemon_turns import (
    check_reads,
    daemon_aborted_turn,
    daemon_compaction,
    daemon_turn,
    daemon_view,
    load,
)


def interrupted_thread(path: Path) -> str:
    """Session "s": q1/a1, then a turn aborted with a partial reply whose inputs ran
    again, then one aborted before any reply, run again too; the first aborted turn."""
    with SyncStore.open(path) as store:
        store.create("s")
    daemon_turn(path, "s", ["q1", "a1"], 1)
    aborted = daemon_aborted_turn(path, "s", ["q2", "q3"], "half an answ", 2)
    daemon_turn(path, "s", ["q2 q3", "a2"], 3)
    daemon_aborted_turn(path, "s", ["q4"], "", 4)
    daemon_turn(path, "s", ["q4", "a4"], 5)
    return aborted


WANT = [
    {"role": "user", "content": "q1"},
    {"role": "assistant", "content": "a1"},
    {"role": "assistant", "content": "half an answ"},
    {"role": "user", "content": "q2 q3"},
    {"role": "assistant", "content": "a2"},
    {"role": "user", "content": "q4"},
    {"role": "assistant", "content": "a4"},
]


def test_the_reads_leave_out_an_aborted_turns_inputs(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    interrupted_thread(path)
    assert daemon_view(load(path, "s")) == WANT
    with SyncStore.open(path) as store:
        check_reads(store, "s", WANT)
        assert [len(t.items) for t in store.turns("s")] == [2, 1, 2, 0, 2]
        store.append("s", ["x"])
        check_reads(store, "s", [*WANT, "x"])


def test_an_aborted_turn_at_the_head_shows_its_partial_reply_alone(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with SyncStore.open(path) as store:
        store.create("s")
    daemon_aborted_turn(path, "s", ["q1"], "", 1)
    with SyncStore.open(path) as store:
        check_reads(store, "s", [])
        assert store.pop("s") is None
    daemon_aborted_turn(path, "s", ["q1", "q2"], "so far", 2)
    with SyncStore.open(path) as store:
        check_reads(store, "s", daemon_view(load(path, "s")))
        assert store.items("s") == [{"role": "assistant", "content": "so far"}]


def test_the_kept_turns_of_a_daemon_compaction_leave_them_out_too(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with SyncStore.open(path) as store:
        store.create("s")
    daemon_turn(path, "s", ["q1", "a1"], 1)
    kept = daemon_aborted_turn(path, "s", ["q2"], "partial", 2)
    daemon_turn(path, "s", ["q2", "a2"], 3)
    daemon_compaction(path, "s", "q1 and a1", kept, 4)
    daemon_aborted_turn(path, "s", ["q5"], "part", 5)
    want = daemon_view(load(path, "s"))
    assert [m["content"] for m in want] == ["q1 and a1", "partial", "q2", "a2", "part"]
    with SyncStore.open(path) as store:
        check_reads(store, "s", want)


def test_a_pop_never_takes_a_hidden_input(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    interrupted_thread(path)
    with SyncStore.open(path) as store:
        for n in range(len(WANT)):
            assert store.pop("s") == WANT[-1 - n], n
            want = WANT[: -1 - n]
            check_reads(store, "s", want)
            assert daemon_view(load(path, "s")) == want  # the copies keep the turn's status
        assert store.pop("s") is None


def test_a_pop_of_a_kept_aborted_turn(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with SyncStore.open(path) as store:
        store.create("s")
    daemon_turn(path, "s", ["q1", "a1"], 1)
    kept = daemon_turn(path, "s", ["q2", "a2"], 2)
    daemon_aborted_turn(path, "s", ["q3", "q4"], "partial", 3)
    daemon_aborted_turn(path, "s", ["q3", "q4"], "", 4)
    daemon_compaction(path, "s", "q1 and a1", kept, 5)
    want = daemon_view(load(path, "s"))
    assert [m["content"] for m in want] == ["q1 and a1", "q2", "a2", "partial"]
    with SyncStore.open(path) as store:
        for n in range(len(want)):
            assert store.pop("s") == want[-1 - n], n
            check_reads(store, "s", want[: -1 - n])
            if n < len(want) - 1:  # after the summary's pop the daemon loads an empty one
                assert daemon_view(load(path, "s")) == want[: -1 - n]


def test_a_library_compaction_summarizes_what_the_reads_show(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    interrupted_thread(path)
    given: list[Any] = []

    def summarize(items: list[Any]) -> list[Any]:
        given.append(items)
        return ["short"]

    with SyncStore.open(path) as store:
        store.compact("s", summarize)
        assert given == [WANT]
        assert store.items("s") == ["short"]


def test_an_export_keeps_the_aborted_turns_and_imports_reading_the_same(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    interrupted_thread(path)
    with SyncStore.open(path) as store:
        data = store.export_jsonl("s")
        lines = [orjson.loads(line) for line in data.splitlines()]
        assert [line["status"] for line in lines[1:]] == [
            "completed",
            "aborted",
            "completed",
            "aborted",
            "completed",
        ]
        assert lines[2]["messages"][0]["content"] == "q2"  # history is never dropped
        store.import_jsonl(data, "copy")
        check_reads(store, "copy", WANT)
        # An export of version 1 (no files, events or titles) reads the same.
        old = [{**lines[0], "version": 1}] + [
            {k: v for k, v in line.items() if k not in ("files", "events", "title")}
            for line in lines[1:]
        ]
        store.import_jsonl(b"\n".join(orjson.dumps(line) for line in old), "old")
        check_reads(store, "old", WANT)
    assert daemon_view(load(path, "copy")) == daemon_view(load(path, "old")) == WANT


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_through_a_daemon(make_daemon: DaemonFactory) -> None:
    d = make_daemon()
    assert d.terminate() == 0
    interrupted_thread(d.ledger)
    d.start()
    async with await Store.connect(d.socket) as remote:
        assert await remote.items("s") == WANT
        for n in range(1, len(WANT) + 2):
            assert await remote.last("s", n) == WANT[-n:], n
        assert [i for t in await remote.turns("s") for i in t.items] == WANT
        for n in range(3):
            assert await remote.pop("s") == WANT[-1 - n]
        assert await remote.items("s") == WANT[:-3]
        await remote.pop("s")
        assert await remote.pop("s") == WANT[2]  # the partial reply, not "q3"
        given: list[Any] = []

        def summarize(items: list[Any]) -> list[Any]:
            given.append(items)
            return ["short"]

        await remote.compact("s", summarize)
        assert given == [WANT[:2]]
    assert d.terminate() == 0


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_agents_sdk_session_leaves_them_out(tmp_path: Path) -> None:
    pytest.importorskip("agents")
    from ledger.integrations.openai_agents import LedgerSession

    path = tmp_path / "ledger.db"
    interrupted_thread(path)
    session = LedgerSession("s", path=path)
    try:
        assert await session.get_items() == WANT
        for n in range(1, len(WANT) + 1):
            assert await session.get_items(limit=n) == WANT[-n:]
        assert await session.pop_item() == WANT[-1]
        assert await session.get_items() == WANT[:-1]
    finally:
        session.close()


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_turn_a_real_daemon_lost_to_a_kill(
    make_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """kill -9 mid-turn: the restart records the turn aborted and runs its input again;
    through the daemon and in process, the library shows that input once."""
    program = tmp_path / "engine.py"
    program.write_text(ENGINE)  # hangs the first time, answers after the restart
    command = [sys.executable, str(program), str(tmp_path / "ran-once")]
    d = make_daemon({"engine": {"kind": "subprocess", "command": command, "timeout_s": 60}})
    async with await Adapter.connect(d, "sms") as a:
        session = (await a.send_inbound("m1", "work through it", "+1", mode="followup"))["session"]
    with anyio.fail_after(15):
        while True:  # until the turn runs: its events are written as it goes
            with contextlib.closing(d.db()) as db:
                if db.execute("SELECT 1 FROM turn_events").fetchone():
                    break
            await anyio.sleep(0.02)
    d.kill()
    d.start()
    async with await Adapter.connect(d, "sms") as a:
        rerun = await a.deliver(msg_id="m1")
        await a.confirm(rerun["out_id"])
    with contextlib.closing(d.db()) as db:
        statuses = db.execute(
            "SELECT status FROM turns WHERE session_label = ? ORDER BY started_at", (session,)
        ).fetchall()
    assert statuses == [("aborted",), ("completed",)]
    want = daemon_view(load(d.ledger, session))
    assert [i["content"] for i in want if i["role"] == "user"] == ["work through it"]
    async with await Store.connect(d.socket) as remote:
        assert await remote.items(session) == want
        for n in range(1, len(want) + 2):
            assert await remote.last(session, n) == want[-n:], n
    assert d.terminate() == 0
    with SyncStore.open(d.ledger) as store:
        check_reads(store, session, want)
