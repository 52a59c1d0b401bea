"""Sessions that end, through the port: closing with a given or a mechanical
summary, what a close refuses (unknown, already closed, pending work) changing
nothing, the successor a closed DM session's next message opens, and the title
and slug a session takes from its first message."""

from __future__ import annotations

import pytest

from core.bindings import Conversation
from core.closing import IdleClose
from core.timers import parse_spec
from ledger.port.errors import Conflict, NotFound
from ledger.port.protocols import LedgerPort, SessionSpec
from ledger.port.records import Limits
from tests.conformance.records import inbound, ingest, tick, turn
from tests.conformance.test_erasure import GROUP, group_message, say

pytestmark = pytest.mark.anyio


async def answered(port: LedgerPort, msg_id: str, text: str, sender: str = "alice") -> str:
    """Ingest a message and run its turn; the session it went to."""
    acc = await ingest(port, inbound(msg_id, sender, text))
    head = (await port.session_show(acc.session, 10))["head"]
    await port.submit_turn(turn(acc.session, head, await port.open_items(acc.session))).result()
    return acc.session


async def test_close_with_a_mechanical_summary_of_the_turn_titles(port: LedgerPort) -> None:
    session = await answered(port, "m1", "Plan the trip to Lisbon")
    await answered(port, "m2", "Book the hotel near the river")
    now = tick()
    closed = await port.close_session(session, None, now)
    assert closed == {
        "session": session,
        "ended_at": now,
        "closing_summary": (
            "Closed after 2 turn(s): Plan the trip to Lisbon; Book the hotel near the river."
        ),
        "source": "mechanical",
    }
    shown = await port.session_show(session, 10)
    assert (shown["status"], shown["ended_at"]) == ("closed", now)
    assert shown["closing_summary"] == closed["closing_summary"]
    assert [s["status"] for s in await port.sessions_list("closed", 10)] == ["closed"]


async def test_close_with_a_given_summary(port: LedgerPort) -> None:
    session = await answered(port, "g1", "hello")
    closed = await port.close_session(session, "Trip booked; nothing left.", tick())
    assert (closed["closing_summary"], closed["source"]) == ("Trip booked; nothing left.", "given")


async def test_bad_closes_answer_and_change_nothing(port: LedgerPort) -> None:
    with pytest.raises(NotFound):
        await port.close_session("dm:nobody", None, tick())
    session = await answered(port, "b1", "hello")
    first = await port.close_session(session, "first", tick())
    with pytest.raises(Conflict, match="already closed"):
        await port.close_session(session, "second", tick())
    shown = await port.session_show(session, 10)
    assert (shown["closing_summary"], shown["ended_at"]) == ("first", first["ended_at"])


async def test_a_session_with_pending_work_stays_open(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("p1", text="still waiting"))
    before = await port.session_show(acc.session, 10)
    with pytest.raises(Conflict, match="1 queued item"):
        await port.close_session(acc.session, None, tick())
    head = before["head"]
    await port.submit_turn(turn(acc.session, head, await port.open_items(acc.session))).result()
    now = tick()
    await port.add_timer(acc.session, parse_spec("later", 30, None, None, now), now)
    with pytest.raises(Conflict, match="1 live timer"):
        await port.close_session(acc.session, None, tick())
    after = await port.session_show(acc.session, 10)
    assert (after["status"], after["ended_at"], after["closing_summary"]) == ("active", None, None)


async def test_a_closed_dm_opens_a_successor_extending_it(port: LedgerPort) -> None:
    first = await answered(port, "s1", "hello")
    await port.close_session(first, None, tick())
    second = await answered(port, "s2", "back again")
    assert second == f"{first}~2"
    shown = await port.session_show(second, 10)
    assert (shown["kind"], shown["status"], shown["extends"]) == ("dm", "active", first)
    assert [t["title"] for t in shown["turns"]] == ["back again"]
    assert (shown["title"], shown["slug"]) == ("back again", "back-again")  # its own first
    assert await answered(port, "s3", "and again") == second  # stable while open
    await port.close_session(second, None, tick())
    third = await answered(port, "s4", "once more")
    assert third == f"{first}~3"
    assert (await port.session_show(third, 10))["extends"] == second
    other = await answered(port, "o1", "hi", sender="bob")  # another person is untouched
    assert other != first and "~" not in other


async def test_a_label_taken_by_a_fork_is_stepped_over(port: LedgerPort) -> None:
    first = await answered(port, "f1", "hello")
    head = (await port.session_show(first, 10))["head"]
    await port.fork(head, f"{first}~2", tick())  # a fork that happens to bear the label
    await port.close_session(first, None, tick())
    successor = await answered(port, "f2", "hello again")
    assert successor == f"{first}~3"
    assert (await port.session_show(successor, 10))["extends"] == first
    fork = await port.session_show(f"{first}~2", 10)
    assert fork["queued"] == [] and len(fork["turns"]) == 1  # nothing of the new message


async def test_nothing_brings_a_closed_session_work(port: LedgerPort) -> None:
    session = await answered(port, "w1", "hello")
    await port.close_session(session, None, tick())
    now = tick()
    with pytest.raises(Conflict, match="is closed"):
        await port.add_timer(session, parse_spec("later", 30, None, None, now), now)
    with pytest.raises(Conflict, match="is closed"):
        await port.dispatch(
            parent=None, parent_turn=None, tool_call=None,
            target={"kind": "session", "session": session}, task="more", persona=None,
            limits=Limits(max_depth=2, max_children=8, timeout_ms=60_000), now=tick(),
        )  # fmt: skip
    assert await port.list_timers(session) == []
    assert await port.open_items(session) == []


async def test_an_erasure_takes_the_words_a_group_session_row_kept(port: LedgerPort) -> None:
    group, _, alice = await say(port, group_message("g1", "alice", "Alice's secret plan"), GROUP)
    await say(port, group_message("g2", "bob", "bob agrees"), GROUP)
    shown = await port.session_show(group, 10)
    assert (shown["title"], shown["slug"]) == ("Alice's secret plan", "alice-s-secret-plan")
    closed = await port.close_session(group, None, tick())
    assert "Alice's secret plan" in closed["closing_summary"]
    assert alice is not None
    await port.erase_entity(alice, alice, tick())
    shown = await port.session_show(group, 10)
    assert (shown["title"], shown["slug"], shown["closing_summary"]) == (None, None, "[erased]")


async def test_a_closed_session_is_bound_to_by_no_one(port: LedgerPort) -> None:
    session = await answered(port, "r1", "hello")
    await port.close_session(session, None, tick())
    with pytest.raises(Conflict, match="is closed"):
        await port.route_bind(Conversation("chat", "dm", "alice", None), session, tick())
    assert await port.route_list(session) == []


async def test_a_long_thread_is_summed_up_by_its_latest_turns(port: LedgerPort) -> None:
    from ledger.closing import TITLES_READ

    acc = await ingest(port, inbound("l0", text="turn 0"))
    head = None
    for n in range(TITLES_READ + 5):
        rec = turn(acc.session, head, await port.open_items(acc.session) if n == 0 else [])
        await port.submit_turn(rec).result()
        head = rec.turn_id
    closed = await port.close_session(acc.session, None, tick())
    assert closed["closing_summary"].startswith(
        f"Closed after more than {TITLES_READ} turn(s), the latest: "
    )


async def test_sessions_idle_past_their_limit_close_by_themselves(
    port: LedgerPort, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Times are the test's own (tick: a second each write), passed in as `now`.
    policy = IdleClose(100.0, (("brief", 10.0), ("forever", 0.0)))
    alice = await answered(port, "i1", "Plan the trip")
    bob = await answered(port, "i2", "hello", sender="bob")
    brief = await port.submit_inbound(
        inbound("i3", "carol", "quick one"), SessionSpec(None, "brief"), tick()
    ).result()
    head = (await port.session_show(brief.session, 10))["head"]
    await port.submit_turn(turn(brief.session, head, await port.open_items(brief.session))).result()
    forever = await port.submit_inbound(
        inbound("i4", "dave", "stay"), SessionSpec(None, "forever"), tick()
    ).result()
    await port.submit_turn(
        turn(forever.session, None, await port.open_items(forever.session))
    ).result()
    waiting = await ingest(port, inbound("i5", "erin", "not answered yet"))  # a queued item
    await port.library_call("append", {"session": "lib", "items": ["x"]}, tick())
    last = tick()

    assert await port.close_idle(IdleClose(), last + 10**9) == []  # 0: never
    soon = last + 50_000
    closed = await port.close_idle(policy, soon)
    assert [c["session"] for c in closed] == [brief.session]
    assert closed[0]["closing_summary"] == "Closed after 1 turn(s): quick one."
    assert closed[0]["source"] == "mechanical" and closed[0]["ended_at"] == soon
    assert await port.close_idle(policy, soon) == []

    later = last + 200_000
    closed = await port.close_idle(policy, later)
    assert sorted(c["session"] for c in closed) == sorted([alice, bob])
    for name in (alice, bob):
        shown = await port.session_show(name, 10)
        assert (shown["status"], shown["ended_at"]) == ("closed", later)
    for name in (forever.session, waiting.session):
        assert (await port.session_show(name, 10))["status"] == "active"
    assert (await port.library_call("get", {"session": "lib"}, tick()))["status"] == "active"
    assert await port.close_idle(policy, later) == []
    # The closed session's next message opens one extending it, as after session.close.
    again = await answered(port, "i6", "back again")
    assert again == f"{alice}~2"
    assert (await port.session_show(again, 10))["extends"] == alice

    # At most IDLE_A_JOB a job, the longest silent first; the caller calls again.
    frank = await answered(port, "i7", "one more", sender="frank")
    monkeypatch.setattr("ledger.closing.IDLE_A_JOB", 1)
    now = tick() + 10**9
    first = await port.close_idle(policy, now)
    second = await port.close_idle(policy, now)
    assert [c["session"] for c in first + second] == [again, frank]
    assert await port.close_idle(policy, now) == []
    assert (await port.session_show(waiting.session, 10))["status"] == "active"
