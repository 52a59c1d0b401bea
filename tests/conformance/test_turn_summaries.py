"""Turn summaries, turn metadata, the session's prompt and model, and the per-session
event sequence, through the port on every backend (ledger/turns.py,
ledger/live_events.py, ledger/sessions.py, core/turn_summary.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from core.engine_types import ToolCall
from ledger.port.errors import NotFound
from ledger.port.protocols import LedgerPort
from plumbing.ids import new_id
from tests.conformance.conftest import open_port
from tests.conformance.records import inbound, ingest, tick, turn

pytestmark = pytest.mark.anyio


async def _turn_with_work(port: LedgerPort) -> tuple[str, str]:
    """A session whose one turn read a file, edited another, decided and said so."""
    acc = await ingest(port, inbound("m1", text="Fix the JWT refresh"))
    [item] = await port.open_items(acc.session)
    rec = turn(acc.session, None, [item], output="Added the check. Tests pass.")
    rec.tool_calls = [
        ToolCall("c1", "read_file", '{"path": "src/jwt.rs"}', "245 lines", "ok"),
        ToolCall("c2", "edit_file", '{"path": "src/auth.rs"}', "ok", "ok"),
        ToolCall("c3", "read_file", '{"path": "missing.rs"}', "no such file", "error"),
    ]
    rec.events = [
        ("intent", {"by": "broker", "inputs": []}),
        ("decision", {"text": "Validate the token before refresh"}),
        ("file", {"path": "src/auth.rs", "op": "edit", "content": "fn x() {}"}),
        ("validation_gate", {"gate": 1, "passed": True}),
    ]
    rec.metadata = {"ticket": "JWT-7", "attempt": 2}
    rec.system_prompt = "You are the auth agent."
    rec.model = "gpt-test"
    await port.submit_turn(rec).result()
    return acc.session, rec.turn_id


async def test_a_turn_is_committed_with_its_summary_and_metadata(port: LedgerPort) -> None:
    session, turn_id = await _turn_with_work(port)
    shown = await port.session_show(session, 10)
    [done] = shown["turns"]
    assert done["id"] == turn_id
    assert done["summary"] == {
        "actions_taken": [
            "read_file src/jwt.rs",
            "edit_file src/auth.rs",
            "read_file missing.rs",
            "edit src/auth.rs",
        ],
        "decisions": ["Validate the token before refresh"],
        "files_read": ["src/jwt.rs"],  # the failed read is an action, not a file read
        "files_modified": ["src/auth.rs"],
        "outcome": "completed: Added the check. Tests pass.",
    }
    assert done["metadata"] == {"ticket": "JWT-7", "attempt": 2}
    # The library's turn reads return them too.
    [read] = await port.library_call("turns", {"session": session}, tick())
    assert (read["summary"], read["metadata"]) == (done["summary"], done["metadata"])
    # The session row keeps the prompt and model of its latest turn that gave one.
    assert (shown["system_prompt"], shown["model"]) == ("You are the auth agent.", "gpt-test")
    # A seed 004 counterpart type is stored as it came.
    events = await port.events_query(
        kind="validation_gate", session=session, turn=None, text=None, limit=5
    )
    assert [e["payload"] for e in events] == [{"gate": 1, "passed": True}]


async def test_the_session_row_keeps_its_prompt_when_a_turn_gives_none(port: LedgerPort) -> None:
    session, head = await _turn_with_work(port)
    await ingest(port, inbound("m2", text="and now?"))
    [item] = await port.open_items(session)
    rec = replace(turn(session, head, [item]), system_prompt=None, model=None)
    await port.submit_turn(rec).result()
    shown = await port.session_show(session, 10)
    assert (shown["system_prompt"], shown["model"]) == ("You are the auth agent.", "gpt-test")
    assert shown["turns"][-1]["metadata"] is None
    assert shown["turns"][-1]["summary"]["outcome"] == "completed: a reply"


async def test_a_later_prompt_replaces_the_kept_one(port: LedgerPort) -> None:
    session, head = await _turn_with_work(port)
    await ingest(port, inbound("m2", text="and now?"))
    [item] = await port.open_items(session)
    rec = replace(turn(session, head, [item]), system_prompt="You are the billing agent.")
    await port.submit_turn(rec).result()
    shown = await port.session_show(session, 10)
    assert (shown["system_prompt"], shown["model"]) == ("You are the billing agent.", "gpt-test")


async def test_export_and_import_carry_summaries_and_metadata(port: LedgerPort) -> None:
    session, _ = await _turn_with_work(port)
    lines = await port.export_session(session, tick())
    [line] = [ln for ln in lines if ln.get("type") == "turn" and "summary" in ln]
    assert line["summary"]["files_modified"] == ["src/auth.rs"]
    assert line["metadata"] == {"ticket": "JWT-7", "attempt": 2}
    made, count = await port.import_session([orjson.dumps(ln) for ln in lines], "copy", tick())
    assert count == 1
    copy = await port.session_show(made, 10)
    original = await port.session_show(session, 10)
    assert [(t["summary"], t["metadata"]) for t in copy["turns"]] == [
        (t["summary"], t["metadata"]) for t in original["turns"]
    ]
    # An export made before summaries imports with none; a summary that is not an
    # object is refused and nothing is imported.
    old = [{k: v for k, v in ln.items() if k not in ("summary", "metadata")} for ln in lines]
    made_old, _ = await port.import_session([orjson.dumps(ln) for ln in old], "old", tick())
    assert [t["summary"] for t in (await port.session_show(made_old, 10))["turns"]] == [None]
    bad = [{**ln, "summary": ["not", "an", "object"]} if "summary" in ln else ln for ln in lines]
    with pytest.raises(Exception, match="summary must be a JSON object"):
        await port.import_session([orjson.dumps(ln) for ln in bad], "bad", tick())


async def test_events_carry_a_gapless_increasing_session_sequence(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    session, head = acc.session, None
    for n in range(3):
        if n:
            await ingest(port, inbound(f"m{n + 1}"))
        items = await port.open_items(session)
        turn_id = new_id()
        await port.submit_mark_running(turn_id, [i.id for i in items], tick()).result()
        # Some events while it runs, the rest with its commit.
        live = [("intent", {"by": "broker"}), ("action", {"tool": "t", "by": "engine"})]
        await port.submit_events(turn_id, session, head, 0, live, tick()).result()
        rec = turn(session, head, items)
        rec.turn_id, rec.events_written = turn_id, 2
        rec.events = [*live, ("memory_recall", {"query": "jwt"}), ("llm", {"model": "m"})]
        await port.submit_turn(rec).result()
        head = turn_id
    events = await port.events_query(kind=None, session=session, turn=None, text=None, limit=50)
    assert sorted(e["session_seq"] for e in events) == list(range(1, 13))
    by_time = sorted(events, key=lambda e: e["session_seq"])
    # Within a turn the session sequence follows the turn's own order.
    for turn_id in {e["turn"] for e in events}:
        mine = [e["seq"] for e in by_time if e["turn"] == turn_id]
        assert mine == sorted(mine)
    assert (await port.session_show(session, 10))["events_seq"] == 12


async def test_a_persons_sessions_and_threads_are_listed_to_resume_one(port: LedgerPort) -> None:
    alice = await ingest(port, inbound("a1", text="plan the trip"))
    [item] = await port.open_items(alice.session)
    first = turn(alice.session, None, [item])
    await port.submit_turn(first).result()
    other = await ingest(port, inbound("s1", sender="alice-sms", channel="sms"))
    bob = await ingest(port, inbound("b1", sender="bob"))
    assert alice.entity and other.entity and bob.entity
    await port.merge_entities(other.entity, alice.entity, tick())
    fork = await port.fork(first.turn_id, None, tick())
    listed = await port.person_sessions(other.entity, 50)
    assert listed["canonical"] == alice.entity
    labels = {s["label"] for s in listed["sessions"]}
    assert labels == {alice.session, other.session, fork}  # not Bob's
    mine = next(s for s in listed["sessions"] if s["label"] == alice.session)
    assert (mine["title"], mine["turns"], mine["ended_at"]) == ("plan the trip", 1, None)
    assert [(t["thread"], t["turns"]) for t in mine["threads"]] == [(1, 1)]
    forked = next(s for s in listed["sessions"] if s["label"] == fork)
    assert forked["parent"] == alice.session
    assert (await port.person_sessions(alice.entity, 1))["sessions"][0]["label"] in labels
    with pytest.raises(NotFound):
        await port.person_sessions("ent_nobody", 10)


async def test_the_session_sequence_goes_on_after_a_restart(
    ledger_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async def one_turn(port: LedgerPort, msg_id: str, head: str | None) -> str:
        acc = await ingest(port, inbound(msg_id))
        items = await port.open_items(acc.session)
        rec = turn(acc.session, head, items)
        rec.events = [("intent", {"by": "broker"}), ("llm", {"model": "m"})]
        await port.submit_turn(rec).result()
        return rec.turn_id

    async with open_port(ledger_backend, tmp_path, request) as port:
        head = await one_turn(port, "m1", None)
    async with open_port(ledger_backend, tmp_path, request) as port:  # the same ledger again
        await one_turn(port, "m2", head)
        events = await port.events_query(kind=None, session=None, turn=None, text=None, limit=9)
    assert sorted(e["session_seq"] for e in events) == [1, 2, 3, 4]
