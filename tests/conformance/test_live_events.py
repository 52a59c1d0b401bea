"""Turn events written while a turn runs, reactions to replies, and the running turn in
`session.show`, through the port (ledger/live_events.py, ledger/live_turns.py)."""

from __future__ import annotations

import orjson
import pytest

from ledger.port.errors import NotFound
from ledger.port.protocols import LedgerPort
from plumbing.ids import new_id
from tests.conformance.records import inbound, ingest, tick, turn

pytestmark = pytest.mark.anyio


async def test_events_written_while_a_turn_runs_are_attached_at_its_commit(
    port: LedgerPort,
) -> None:
    acc = await ingest(port, inbound("m1", text="Fix the login bug\nplease"))
    items = await port.open_items(acc.session)
    turn_id = new_id()
    await port.submit_mark_running(turn_id, [i.id for i in items], tick()).result()
    written = [("intent", {"by": "broker"}), ("decision", {"text": "use argon2"})]
    await port.submit_events(turn_id, acc.session, None, 0, written, tick()).result()
    await port.submit_events(
        turn_id, acc.session, None, 2, [("file", {"path": "a.py", "op": "create"})], tick()
    ).result()
    # Before the commit: readable, and the turn is listed as running, last.
    early = await port.events_query(kind=None, session=None, turn=turn_id, text=None, limit=10)
    assert [e["seq"] for e in reversed(early)] == [0, 1, 2]
    shown = await port.session_show(acc.session, 10)
    [running] = shown["turns"]
    assert (running["id"], running["status"], running["inputs"]) == (turn_id, "running", ["m1"])
    assert (running["title"], running["events"]) == ("Fix the login bug", 3)
    # The commit writes only the rest, and counts them all.
    [item] = await port.open_items(acc.session)
    rec = turn(acc.session, None, [item])
    rec.turn_id = turn_id
    rec.events = [*written, ("file", {"path": "a.py", "op": "create"}), ("llm", {"model": "m"})]
    rec.events_written = 3
    await port.submit_turn(rec).result()
    events = await port.events_query(kind=None, session=None, turn=turn_id, text=None, limit=10)
    assert [(e["seq"], e["type"]) for e in reversed(events)] == [
        (0, "intent"),
        (1, "decision"),
        (2, "file"),
        (3, "llm"),
        (4, "snapshot"),  # the files the turn left
    ]
    assert events[0]["payload"]["files"][0]["path"] == "a.py"
    shown = await port.session_show(acc.session, 10)
    [done] = shown["turns"]
    assert (done["status"], done["title"], done["outcome"]) == (
        "completed",
        "Fix the login bug",
        "completed",
    )
    totals = shown["totals"]
    assert (totals["events"], totals["model_calls"], totals["files_modified"]) == (5, 1, 1)


async def test_crash_recovery_records_the_turn_aborted_with_its_events(
    port: LedgerPort,
) -> None:
    acc = await ingest(port, inbound("m1"))
    items = await port.open_items(acc.session)
    turn_id = new_id()
    await port.submit_mark_running(turn_id, [i.id for i in items], tick()).result()
    await port.submit_events(
        turn_id, acc.session, None, 0, [("intent", {}), ("action", {"tool": "x"})], tick()
    ).result()
    assert await port.recover_crashed(tick(), acc.session) == [turn_id]
    shown = await port.session_show(acc.session, 10)
    [aborted] = shown["turns"]
    assert (aborted["id"], aborted["status"], aborted["outcome"]) == (
        turn_id,
        "aborted",
        "aborted (crash): the broker stopped while this turn ran",
    )
    assert shown["totals"]["events"] == 2
    events = await port.events_query(kind=None, session=None, turn=turn_id, text=None, limit=10)
    assert [e["type"] for e in reversed(events)] == ["intent", "action"]


async def test_a_reaction_is_feedback_once_and_an_unknown_reply_is_not_found(
    port: LedgerPort,
) -> None:
    acc = await ingest(port, inbound("m1"))
    [item] = await port.open_items(acc.session)
    rec = turn(acc.session, None, [item], outbox_channel="chat")
    await port.submit_turn(rec).result()
    assert rec.outbox is not None
    out_id = rec.outbox[0]
    first = await port.submit_feedback("chat", out_id, "r1", "alice", "+1", "", tick()).result()
    again = await port.submit_feedback("chat", out_id, "r1", "alice", "+1", "", tick()).result()
    assert first == (acc.session, rec.turn_id, False)
    assert again == (acc.session, rec.turn_id, True)
    for channel, reply in (("chat", "nope"), ("other", out_id)):
        with pytest.raises(NotFound) as missing:
            await port.submit_feedback(channel, reply, "r2", "alice", "+1", "", tick()).result()
        assert missing.value.field == "reply_to"
    feedback = await port.events_query(
        kind="feedback", session=None, turn=None, text=None, limit=10
    )
    assert [(e["turn"], e["payload"]["reaction"]) for e in feedback] == [(rec.turn_id, "+1")]


async def test_export_and_import_carry_titles_and_outcomes(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1", text="Plan the trip\nto Rome"))
    [item] = await port.open_items(acc.session)
    await port.submit_turn(turn(acc.session, None, [item])).result()
    lines = await port.export_session(acc.session, tick())
    label, count = await port.import_session([orjson.dumps(line) for line in lines], None, tick())
    [copied] = (await port.session_show(label, 10))["turns"]
    assert (count, copied["title"], copied["outcome"]) == (1, "Plan the trip", "completed")
    # An export from before titles: the turns come in, their title unknown.
    old = [{k: v for k, v in line.items() if k not in ("title", "outcome")} for line in lines]
    label, _ = await port.import_session([orjson.dumps(line) for line in old], None, tick())
    [bare] = (await port.session_show(label, 10))["turns"]
    assert (bare["title"], bare["outcome"]) == (None, None)


async def test_a_turn_cut_off_before_any_event_was_written_gets_its_intent(
    port: LedgerPort,
) -> None:
    acc = await ingest(port, inbound("m1", text="hello there"))
    items = await port.open_items(acc.session)
    turn_id = new_id()
    await port.submit_mark_running(turn_id, [i.id for i in items], tick()).result()
    assert await port.recover_crashed(tick(), acc.session) == [turn_id]
    [intent] = await port.events_query(kind=None, session=None, turn=turn_id, text=None, limit=5)
    assert (intent["seq"], intent["type"]) == (0, "intent")
    assert intent["payload"]["inputs"] == [
        {"msg_id": "m1", "sender": "Alice", "text": "hello there"}
    ]
