"""The library face through the port (`library_call`, what `store.call` runs): a
session's items in and out, serialized appends, bad arguments refused whole."""

from __future__ import annotations

import dataclasses

import anyio
import orjson
import pytest

from ledger.port.errors import LedgerLookupError, NotFound
from ledger.port.protocols import LedgerPort
from tests.conformance.records import inbound, ingest, tick, turn

pytestmark = pytest.mark.anyio


async def test_items_in_and_out(port: LedgerPort) -> None:
    assert await port.library_call("create", {"session": "lib", "title": "T"}, tick()) == {
        "created": True
    }
    turn = await port.library_call("append", {"session": "lib", "items": [{"a": 1}, 2]}, tick())
    await port.library_call("append", {"session": "lib", "items": ["c"]}, tick())
    assert await port.library_call("items", {"session": "lib"}, tick()) == [{"a": 1}, 2, "c"]
    assert await port.library_call("last", {"session": "lib", "n": 2}, tick()) == [2, "c"]
    got = await port.library_call("get", {"session": "lib"}, tick())
    assert (got["title"], got["turns"]) == ("T", 2)
    turns = await port.library_call("turns", {"session": "lib"}, tick())
    assert turns[0]["id"] == turn["turn"] and turns[0]["items"] == [{"a": 1}, 2]
    assert await port.library_call("pop", {"session": "lib"}, tick()) == {
        "found": True,
        "item": "c",
    }
    assert await port.library_call("clear", {"session": "lib"}, tick()) == {}
    assert await port.library_call("items", {"session": "lib"}, tick()) == []


async def test_what_a_read_returns_is_a_copy_the_caller_may_change(port: LedgerPort) -> None:
    # What `library_call` returns (what the daemon's `store.call` answers) is decoded
    # afresh at each call: a caller changing it, or what it passed in, changes nothing.
    meta = {"tags": ["x"], "n": {"deep": 1}}
    await port.library_call("create", {"session": "lib", "metadata": meta}, tick())
    given: list[object] = [{"a": [1, 2]}, ["b"]]
    await port.library_call("append", {"session": "lib", "items": given}, tick())
    meta["tags"].append("after the create")  # type: ignore[attr-defined]
    given.append("after the append")
    items = await port.library_call("items", {"session": "lib"}, tick())
    items[0]["a"].append(3)
    items.append("more")
    last = await port.library_call("last", {"session": "lib", "n": 1}, tick())
    last[0].append("c")
    turns = await port.library_call("turns", {"session": "lib"}, tick())
    turns[0]["items"].clear()
    got = await port.library_call("get", {"session": "lib"}, tick())
    got["metadata"]["n"]["deep"] = 2

    assert await port.library_call("items", {"session": "lib"}, tick()) == [{"a": [1, 2]}, ["b"]]
    turns = await port.library_call("turns", {"session": "lib"}, tick())
    assert [t["items"] for t in turns] == [[{"a": [1, 2]}, ["b"]]]
    got = await port.library_call("get", {"session": "lib"}, tick())
    assert got["metadata"] == {"tags": ["x"], "n": {"deep": 1}}


async def test_a_pop_of_a_summary_copies_the_compaction(port: LedgerPort) -> None:
    # ledger/api/writes.py: the thread starts at the compaction, before and after.
    await port.library_call("append", {"session": "lib", "items": ["a", "b"]}, tick())
    head = (await port.library_call("get", {"session": "lib"}, tick()))["head_turn"]
    compact = {"session": "lib", "head": head, "summary": ["one", "two"], "turns": 1}
    await port.library_call("compact", compact, tick())
    for item in ("two", "one"):
        popped = await port.library_call("pop", {"session": "lib"}, tick())
        assert popped == {"found": True, "item": item}
    assert await port.library_call("items", {"session": "lib"}, tick()) == []
    assert await port.library_call("pop", {"session": "lib"}, tick()) == {
        "found": False,
        "item": None,
    }
    turns = await port.library_call("turns", {"session": "lib"}, tick())
    assert [(t["type"], t["items"]) for t in turns] == [("compaction", [])]


async def test_concurrent_appends_are_serialized(port: LedgerPort) -> None:
    async def append(n: int) -> None:
        await port.library_call("append", {"session": "s", "items": [n, n]}, tick())

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(append, n)
    turns = await port.library_call("turns", {"session": "s"}, tick())
    assert sorted(t["items"][0] for t in turns) == list(range(20))
    assert all(t["items"][0] == t["items"][1] for t in turns)


async def test_bad_calls_are_refused_naming_the_argument(port: LedgerPort) -> None:
    with pytest.raises(LedgerLookupError) as missing:
        await port.library_call("append", {"session": "s"}, tick())
    assert (missing.value.code, missing.value.field) == ("invalid", "items")
    with pytest.raises(LedgerLookupError) as wrong:
        await port.library_call("last", {"session": "s", "n": "3"}, tick())
    assert wrong.value.field == "n"
    with pytest.raises(LedgerLookupError) as unknown:
        await port.library_call("drop_table", {}, tick())
    assert unknown.value.field == "call"
    with pytest.raises(NotFound):
        await port.library_call("get", {"session": "s"}, tick())


async def test_adk_calls_keep_a_session_record_beside_its_turns(port: LedgerPort) -> None:
    record = {"id": "s", "state": {"k": 1}, "create_time": 10.5, "update_time": 10.5}
    label = "adk:app:ada:s"
    base = {"session": label, "app": "app", "user": "ada"}
    shared = await port.library_call(
        "adk.create",
        {**base, "record": record, "app_delta": {"lang": "en"}, "user_delta": {}, "ts": 10.5},
        tick(),
    )
    assert shared == {"app": {"lang": "en"}, "user": {}}
    for n, delta in ((1, {"k": 2}), (2, {})):
        await port.library_call(
            "adk.append",
            {
                **base,
                "event": f'{{"n": {n}, "timestamp": {10.5 + n}}}',
                "session_delta": delta,
                "app_delta": {},
                "user_delta": {"name": "Ada"} if n == 1 else {},
                "ts": 10.5 + n,
            },
            tick(),
        )
    view = await port.library_call("adk.get", {**base, "recent": 1}, tick())
    assert view["events"] == [{"n": 2, "timestamp": 12.5}]
    assert view["record"] == {**record, "user": "ada", "state": {"k": 2}, "update_time": 12.5}
    assert (view["app"], view["user"]) == ({"lang": "en"}, {"name": "Ada"})
    listed = await port.library_call("adk.list", {"app": "app"}, tick())
    assert [r["id"] for r in listed["records"]] == ["s"]
    with pytest.raises(LedgerLookupError) as bad:
        await port.library_call("adk.append", {**base, "event": "{not json"}, tick())
    assert bad.value.field == "event"
    with pytest.raises(NotFound):
        await port.library_call(
            "adk.append",
            {**base, "session": "adk:app:ada:ghost", "event": "{}", "session_delta": {},
             "app_delta": {}, "user_delta": {}, "ts": 1.0},
            tick(),
        )  # fmt: skip
    await port.library_call("delete", {"session": label}, tick())
    assert await port.library_call("adk.get", {**base, "recent": None}, tick()) == {}


async def test_a_daemon_compaction_keeping_turns_reads_exports_and_pops_alike(
    port: LedgerPort,
) -> None:
    # ledger/api/reads.py, writes.py, ledger/sessions.py.
    acc = await ingest(port, inbound("m1", text="q1"))
    parent = None
    turns = []
    for n in range(3):
        if n:
            await ingest(port, inbound(f"m{n + 1}", text=f"q{n + 1}"))
        rec = turn(acc.session, parent, await port.open_items(acc.session), f"a{n + 1}")
        await port.submit_turn(rec).result()
        parent = rec.turn_id
        turns.append(rec)
    compaction = turn(
        acc.session,
        parent,
        [],
        "q1 and a1",
        kind="compaction",
        compaction={
            "summary": "q1 and a1",
            "summarized_through_turn_id": turns[0].turn_id,
            "first_kept_turn_id": turns[1].turn_id,
            "turns_summarized": 1,
            "trigger": "proactive",
        },
    )
    await port.submit_turn(compaction).result()
    want = [{"role": "assistant", "content": "q1 and a1"}] + [
        {"role": role, "content": f"{letter}{n}"}
        for n in (2, 3)
        for role, letter in (("user", "q"), ("assistant", "a"))
    ]
    session = {"session": acc.session}
    assert await port.library_call("items", session, tick()) == want
    assert await port.library_call("last", {**session, "n": 2}, tick()) == want[-2:]
    thread = await port.library_call("thread", session, tick())
    assert thread["head"] == compaction.turn_id
    assert [i for t in thread["turns"] for i in t["items"]] == want
    lines = await port.export_session(acc.session, tick())
    made, _ = await port.import_session([orjson.dumps(line) for line in lines], "copy", tick())
    assert await port.library_call("items", {"session": made}, tick()) == want
    original, copy = await port.session_start(acc.session), await port.session_start(made)
    assert original.thread is not None and copy.thread is not None
    assert copy.thread.summary == original.thread.summary == "q1 and a1"
    assert [t.messages for t in copy.thread.turns] == [t.messages for t in original.thread.turns]
    popped = await port.library_call("pop", session, tick())
    assert popped == {"found": True, "item": want[-1]}
    assert await port.library_call("items", session, tick()) == want[:-1]


async def test_an_aborted_turn_reads_exports_and_pops_as_the_context_loads_it(
    port: LedgerPort,
) -> None:
    # ledger/api/reads.py, writes.py, ledger/sessions.py.
    acc = await ingest(port, inbound("m1", text="q1"))
    first = turn(acc.session, None, await port.open_items(acc.session), "a1")
    await port.submit_turn(first).result()
    await ingest(port, inbound("m2", text="q2"))
    cut = turn(acc.session, first.turn_id, await port.open_items(acc.session), "half")
    cut = dataclasses.replace(cut, status="aborted", reason="interrupt", item_status="queued")
    await port.submit_turn(cut).result()
    await ingest(port, inbound("m3", text="q3"))
    again = await port.open_items(acc.session)
    assert [i.content for i in again] == ["q2", "q3"]  # q2 runs again
    await port.submit_turn(turn(acc.session, cut.turn_id, again, "a3")).result()
    start = await port.session_start(acc.session)
    assert start.thread is not None
    want = [{"role": r, "content": c} for t in start.thread.turns for r, c, _ in t.messages]
    assert [i["content"] for i in want] == ["q1", "a1", "half", "q2", "q3", "a3"]
    session = {"session": acc.session}
    assert await port.library_call("items", session, tick()) == want
    for n in range(1, len(want) + 2):
        assert await port.library_call("last", {**session, "n": n}, tick()) == want[-n:]
    thread = await port.library_call("thread", session, tick())
    assert [len(t["items"]) for t in thread["turns"]] == [2, 1, 3]
    lines = await port.export_session(acc.session, tick())
    assert [line.get("status") for line in lines[1:]] == ["completed", "aborted", "completed"]
    made, _ = await port.import_session([orjson.dumps(line) for line in lines], "copy", tick())
    assert await port.library_call("items", {"session": made}, tick()) == want
    for n in range(len(want)):
        popped = await port.library_call("pop", session, tick())
        assert popped == {"found": True, "item": want[-1 - n]}
        assert await port.library_call("items", session, tick()) == want[: -1 - n]
        start = await port.session_start(acc.session)
        shown = [] if start.thread is None else start.thread.turns
        assert [(r, c) for t in shown for r, c, _ in t.messages] == [
            (i["role"], i["content"]) for i in want[: -1 - n]
        ]
