"""The session-state record of a thread and the bridge notes of a merge, through the
port: `state_record`, `session_state`, `SessionStart.bridges`."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from core.engine_types import ToolCall
from core.identity import SessionSpec
from core.session_state import EMPTY
from ledger.port.errors import NotFound
from ledger.port.protocols import ItemInfo, LedgerPort, TurnRecord
from ledger.port.records import Request, Searched, Summary
from tests.conformance.records import inbound, ingest, tick, turn

pytestmark = pytest.mark.anyio


async def one_turn(
    port: LedgerPort, session: str, parent: str | None, text: str, **changes: object
) -> TurnRecord:
    """File `text` from alice into `session` and commit a turn for it on `parent`."""
    await ingest(port, inbound(f"m-{tick()}", text=text))
    items: list[ItemInfo] = [i for i in await port.open_items(session) if i.content == text]
    rec = dataclasses.replace(turn(session, parent, items), **changes)  # type: ignore[arg-type]
    await port.submit_turn(rec).result()
    return rec


def edit(path: str) -> ToolCall:
    return ToolCall("c-" + path, "edit_file", orjson.dumps({"path": path}).decode(), "ok", "ok")


async def test_the_record_is_the_threads_and_a_fork_inherits_its_ancestors_part(
    port: LedgerPort,
) -> None:
    acc = await ingest(port, inbound("m0", text="warm up"))
    label = acc.session
    [first_item] = await port.open_items(label)
    t1 = dataclasses.replace(
        turn(label, None, [first_item]),
        tool_calls=[edit("src/a.py")],
        events=[("decision", {"text": "use JWT"})],
        model="m1",
    )
    await port.submit_turn(t1).result()
    t2 = await one_turn(
        port, label, t1.turn_id, "now the tests", events=[("decision", {"text": "use pytest"})]
    )
    state = await port.session_state(label)
    assert state["focus"] == "now the tests"
    assert [d["text"] for d in state["decisions"]] == ["use JWT", "use pytest"]
    assert [(f["path"], f["action"], f["turn"]) for f in state["files"]] == [
        ("src/a.py", "edit_file", 1)
    ]
    assert state["session"] == {
        "id": label,
        "head": t2.turn_id,
        "model": "m1",
        "turns": 2,
        "tool_calls": 1,
        "prompt_tokens": 6,
        "completion_tokens": 4,
    }
    at_t1 = await port.state_record(t1.turn_id)
    assert at_t1.focus == "warm up" and [d.text for d in at_t1.decisions] == ["use JWT"]

    fork = await port.fork(t1.turn_id, "fork-1", tick())
    forked = await port.session_state(fork)
    assert forked["focus"] == "warm up"
    assert [d["text"] for d in forked["decisions"]] == ["use JWT"]  # not turn 2's
    assert forked["session"]["id"] == fork and forked["session"]["turns"] == 1


async def test_a_new_thread_starts_with_an_empty_record(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m0", text="about cats"))
    [item] = await port.open_items(acc.session)
    first = dataclasses.replace(
        turn(acc.session, None, [item]), events=[("decision", {"text": "cats first"})]
    )
    await port.submit_turn(first).result()
    await port.submit_new_thread(acc.session, tick()).result()
    empty = await port.session_state(acc.session)
    assert (empty["focus"], empty["decisions"], empty["session"]["turns"]) == (None, [], 0)
    assert empty["session"]["head"] is None
    await one_turn(port, acc.session, None, "about dogs")
    fresh = await port.session_state(acc.session)
    assert fresh["focus"] == "about dogs" and fresh["decisions"] == []
    assert fresh["session"]["turns"] == 1
    assert (await port.state_record(first.turn_id)).decisions[0].text == "cats first"


async def test_unknown_turns_and_sessions_are_not_found(port: LedgerPort) -> None:
    assert await port.state_record(None) == EMPTY
    with pytest.raises(NotFound):
        await port.state_record("no-such-turn")
    with pytest.raises(NotFound):
        await port.session_state("dm:nobody")


async def test_a_merge_leaves_one_bridge_note_that_a_completed_turn_consumes(
    port: LedgerPort,
) -> None:
    chat = await ingest(port, inbound("c1", sender="mom", text="chat hello", channel="chat"))
    mail = await ingest(port, inbound("e1", sender="mom@x", text="weekend plans", channel="mail"))
    for acc in (chat, mail):
        [item] = await port.open_items(acc.session)
        rec = dataclasses.replace(
            turn(acc.session, None, [item]), events=[("decision", {"text": f"{acc.session} d"})]
        )
        await port.submit_turn(rec).result()
    # chat gets a second turn so it is the primary (most turns)
    head = (await port.session_show(chat.session, 10))["head"]
    await one_turn(port, chat.session, head, "more chat")
    a = (await port.contact_show("chat", "mom"))["entity"]
    b = (await port.contact_show("mail", "mom@x"))["entity"]
    merged = await port.merge_entities(b, a, tick())
    assert merged.primary == chat.session
    [(bridge, note)] = merged.bridges.items()
    assert mail.session in note and f"{mail.session} d" in note and "weekend plans" in note
    start = await port.session_start(chat.session)
    assert start.bridges == {bridge: note}

    head = (await port.session_show(chat.session, 10))["head"]
    aborted = await one_turn(
        port, chat.session, head, "hi again", status="aborted", bridges=(bridge,)
    )
    assert (await port.session_start(chat.session)).bridges == {bridge: note}
    done = await one_turn(port, chat.session, aborted.turn_id, "hi again!", bridges=(bridge,))
    assert (await port.session_start(chat.session)).bridges == {}
    assert (await port.session_state(chat.session))["session"]["head"] == done.turn_id
    again = await port.merge_entities(b, a, tick())  # idempotent: no second note
    assert again.bridges == {}


async def test_recall_covers_the_persons_sessions_and_never_another_persons(
    port: LedgerPort,
) -> None:
    sessions = {}
    for sender, channel, text in (
        ("mom", "chat", "hello from chat"),
        ("mom@x", "mail", "the cat is called Tom"),
        ("zed", "chat", "Tom is my secret too"),
    ):
        acc = await ingest(port, inbound(f"{sender}-1", sender=sender, text=text, channel=channel))
        [item] = await port.open_items(acc.session)
        await port.submit_turn(turn(acc.session, None, [item], "noted")).result()
        sessions[sender] = acc.session
    a = (await port.contact_show("chat", "mom"))["entity"]
    b = (await port.contact_show("mail", "mom@x"))["entity"]

    async def tom(session: str, person: bool = True) -> set[str]:
        found = await port.recall(Request("search", session, 10, query="Tom", person=person))
        assert isinstance(found, Searched)
        return {h.session for h in found.hits}

    assert await tom(sessions["mom"]) == set()  # not the same person yet
    await port.merge_entities(b, a, tick())
    assert await tom(sessions["mom"]) == {sessions["mom@x"]}
    assert await tom(sessions["mom@x"]) == {sessions["mom@x"]}  # merged: still its person's
    assert await tom(sessions["mom"], person=False) == set()  # the session alone
    assert await tom(sessions["zed"]) == {sessions["zed"]}
    summary = await port.recall(Request("summary", sessions["mom"], 1, person=True))
    assert isinstance(summary, Summary)
    assert summary.related == ((sessions["mom@x"], 1),)
    assert summary.state.focus == "hello from chat"


async def test_a_merge_demoting_two_sessions_leaves_their_notes_oldest_first(
    port: LedgerPort,
) -> None:
    """Found by test_port_differential: the demoted sessions came in the engine's row
    order, so the notes' ids, and their order in the next turn's context, differed
    between SQLite and PostgreSQL (whose updated rows move to the end of the table)."""
    room = SessionSpec("room:{entity}", None)
    first = await ingest(port, inbound("a1", sender="ann", text="first"))
    second = await port.submit_inbound(
        inbound("b1", sender="bo", text="second"), room, tick()
    ).result()
    made = [first, second]
    made.append(await ingest(port, inbound("b2", sender="bo", text="third")))
    head: dict[str, str | None] = {}
    for acc in (made[1], made[2], made[2], made[0]):  # the oldest session changed last
        rec = turn(acc.session, head.get(acc.session), [])
        await port.submit_turn(rec).result()
        head[acc.session] = rec.turn_id
    a, b = made[0].entity, made[2].entity
    assert a is not None and b is not None
    merged = await port.merge_entities(a, b, tick())
    assert merged.primary == made[2].session  # the most turns
    order = [note.split(" ", 9)[8].rstrip(",") for note in merged.bridges.values()]
    assert order == [made[0].session, made[1].session]
    assert list((await port.session_start(made[2].session)).bridges) == list(merged.bridges)
    assert list(merged.bridges) == sorted(merged.bridges)
