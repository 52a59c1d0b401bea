"""Turns, their head compare-and-swap, crash recovery, replies and workers, through
the port."""

from __future__ import annotations

import pytest

from ledger.port.errors import HeadMoved, NotFound
from ledger.port.protocols import LedgerPort, SessionSpec
from ledger.port.records import Limits
from plumbing.ids import new_id
from tests.conformance.records import inbound, ingest, tick, turn

pytestmark = pytest.mark.anyio
LIMITS = Limits(max_depth=2, max_children=4, timeout_ms=60_000)


async def test_a_turn_runs_its_items_and_moves_the_head(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    items = await port.open_items(acc.session)
    turn_id = new_id()
    await port.submit_mark_running(turn_id, [i.id for i in items], tick()).result()
    [running] = await port.open_items(acc.session)
    assert (running.status, running.turn_id) == ("running", turn_id)
    rec = turn(acc.session, None, [running], "hi alice")
    rec.turn_id = turn_id
    assert await port.submit_turn(rec).result() == []
    assert await port.open_items(acc.session) == []
    shown = await port.session_show(acc.session, 10)
    assert shown["head"] == turn_id
    [row] = shown["turns"]
    assert (row["id"], row["status"], row["inputs"], row["output"]) == (
        turn_id,
        "completed",
        ["m1"],
        "hi alice",
    )
    start = await port.session_start(acc.session)
    assert (start.start.head, start.start.turns) == (turn_id, 1)
    assert start.start.route == ("chat", "dm", "alice", None)
    assert start.thread is not None
    [stored] = start.thread.turns
    assert [(role, text) for role, text, _ in stored.messages] == [
        ("user", "hello"),
        ("assistant", "hi alice"),
    ]


async def test_a_lost_head_race_is_head_moved_and_recorded_off_the_thread(
    port: LedgerPort,
) -> None:
    a = await ingest(port, inbound("m1"))
    b = await ingest(port, inbound("m2"))
    first, second = await port.open_items(a.session)
    won = turn(a.session, None, [first])
    await port.submit_turn(won).result()
    lost = turn(b.session, None, [second], "too late")  # started from the old head
    with pytest.raises(HeadMoved):
        await port.submit_turn(lost).result()
    assert (await port.session_show(a.session, 10))["head"] == won.turn_id  # nothing written
    await port.submit_orphan(lost).result()
    shown = await port.session_show(a.session, 10)
    assert shown["head"] == won.turn_id
    assert [t["id"] for t in shown["turns"]] == [won.turn_id]  # the orphan is off the thread
    hits = await port.recall_search("too late", a.session, 5)
    assert [h.turn for h in hits] == [lost.turn_id]  # ...but kept in the archive


async def test_turns_cut_off_by_a_crash_are_aborted_and_their_items_queued_again(
    port: LedgerPort,
) -> None:
    acc = await ingest(port, inbound("m1"))
    items = await port.open_items(acc.session)
    turn_id = new_id()
    await port.submit_mark_running(turn_id, [i.id for i in items], tick()).result()
    await port.submit_progress(turn_id, acc.session, "half a rep", tick()).result()
    assert await port.recover_crashed(tick()) == [turn_id]
    [again] = await port.open_items(acc.session)
    assert (again.id, again.status) == (acc.item, "queued")
    [aborted] = (await port.session_show(acc.session, 10))["turns"]
    assert (aborted["id"], aborted["status"], aborted["reason"], aborted["output"]) == (
        turn_id,
        "aborted",
        "crash",
        "half a rep",
    )
    assert await port.recover_crashed(tick()) == []  # nothing left to recover


async def test_an_item_keeps_its_route_mode_across_a_crash(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1", route_mode="collect"))
    [item] = await port.open_items(acc.session)
    assert (item.mode, item.route_mode) == (None, "collect")
    await port.submit_mark_running(new_id(), [item.id], tick()).result()
    await port.recover_crashed(tick())
    [again] = await port.open_items(acc.session)
    assert (again.id, again.status, again.route_mode) == (item.id, "queued", "collect")


async def test_recovery_of_one_session_leaves_the_others_running(port: LedgerPort) -> None:
    a = await ingest(port, inbound("m1", sender="ann"))
    b = await ingest(port, inbound("m2", sender="ben"))
    for acc in (a, b):
        await port.submit_mark_running(new_id(), [acc.item], tick()).result()
    assert len(await port.recover_crashed(tick(), session=a.session)) == 1
    assert [i.status for i in await port.open_items(b.session)] == ["running"]


async def test_a_reply_stays_in_the_outbox_until_delivered(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    rec = turn(acc.session, None, await port.open_items(acc.session), outbox_channel="chat")
    await port.submit_turn(rec).result()
    assert rec.outbox is not None
    out_id = rec.outbox[0]
    [row] = await port.pending_outbox("chat", 10)
    assert (row.out_id, row.session, row.frame) == (out_id, acc.session, rec.outbox[2])
    assert await port.pending_outbox("mail", 10) == []
    assert await port.submit_delivered([out_id], tick()).result() == 1
    assert await port.pending_outbox("chat", 10) == []
    assert await port.submit_delivered([out_id], tick()).result() == 0  # once only


async def test_the_outbox_pages_oldest_first(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    reply = ("o1", acc.session, "chat", '{"type":"deliver"}')
    await port.submit_command_done(acc.item, "command", reply, False, tick()).result()
    for n in range(2, 5):
        await port.submit_command_done(
            acc.item, "command", (f"o{n}", acc.session, "chat", "{}"), False, tick()
        ).result()
    first = await port.pending_outbox("chat", 2)
    rest = await port.pending_outbox("chat", 10, after=first[-1].key)
    assert [r.out_id for r in first + rest] == ["o1", "o2", "o3", "o4"]
    assert await port.open_items() == []  # the command's item is done


async def test_a_command_sets_and_clears_the_queue_override(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1", text="/queue collect"))
    await port.submit_command_done(acc.item, "command", None, '{"mode":"collect"}', tick()).result()
    assert (await port.session_start(acc.session)).start.override == '{"mode":"collect"}'
    b = await ingest(port, inbound("m2", text="/queue reset"))
    await port.submit_command_done(b.item, "command", None, None, tick()).result()
    assert (await port.session_start(acc.session)).start.override is None


async def test_the_queue_override_is_read_alone(port: LedgerPort) -> None:
    """What a session workflow's run reads at its start (its thread is not loaded)."""
    acc = await ingest(port, inbound("m1", text="/queue collect"))
    assert await port.queue_override(acc.session) is None
    await port.submit_command_done(acc.item, "command", None, '{"mode":"collect"}', tick()).result()
    assert await port.queue_override(acc.session) == '{"mode":"collect"}'
    with pytest.raises(NotFound):
        await port.queue_override("no-such-session")


async def test_dropped_items_leave_the_queue(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    await port.submit_item_status([(acc.item, "dropped", "cap:old")], tick()).result()
    assert await port.open_items() == []


async def test_a_new_thread_starts_with_no_head_and_keeps_the_old_turns(
    port: LedgerPort,
) -> None:
    acc = await ingest(port, inbound("m1"))
    rec = turn(acc.session, None, await port.open_items(acc.session))
    await port.submit_turn(rec).result()
    await port.submit_new_thread(acc.session, tick()).result()
    start = await port.session_start(acc.session)
    assert (start.start.head, start.thread) == (None, None)
    assert [h.turn for h in await port.recall_search("reply", acc.session, 5)] == [rec.turn_id]


async def test_a_compaction_is_a_turn_and_the_thread_loads_from_it(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    first = turn(acc.session, None, await port.open_items(acc.session), "old answer")
    await port.submit_turn(first).result()
    compaction = turn(
        acc.session,
        first.turn_id,
        [],
        "",
        kind="compaction",
        compaction={
            "summary": "they said hello",
            "summarized_through_turn_id": first.turn_id,
            "first_kept_turn_id": None,
            "turns_summarized": 1,
            "trigger": "manual",
        },
    )
    await port.submit_turn(compaction).result()
    b = await ingest(port, inbound("m2", text="again"))
    after = turn(acc.session, compaction.turn_id, await port.open_items(b.session), "new answer")
    await port.submit_turn(after).result()
    start = await port.session_start(acc.session)
    assert start.thread is not None
    assert start.thread.summary == "they said hello"
    assert [t.id for t in start.thread.turns] == [after.turn_id]


async def test_a_fork_shares_the_thread_up_to_its_turn(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    first = turn(acc.session, None, await port.open_items(acc.session))
    await port.submit_turn(first).result()
    b = await ingest(port, inbound("m2"))
    second = turn(acc.session, first.turn_id, await port.open_items(b.session))
    await port.submit_turn(second).result()
    sessions = (await port.counts())["sessions"]
    label = await port.fork(first.turn_id, "my-fork", tick())
    assert label == "my-fork"
    shown = await port.session_show(label, 10)
    assert (shown["head"], shown["parent"], shown["parent_turn"]) == (
        first.turn_id,
        acc.session,
        first.turn_id,
    )
    # Constant time: the fork points at the turn; no turn is copied.
    assert [(t["id"], t["session"]) for t in shown["turns"]] == [(first.turn_id, acc.session)]
    assert (await port.counts())["sessions"] == sessions + 1
    with pytest.raises(NotFound):
        await port.fork("no-such-turn", None, tick())


async def test_a_fork_keeps_the_persona_of_its_session(port: LedgerPort) -> None:
    acc = await port.submit_inbound(inbound("m1"), SessionSpec(None, "loud"), tick()).result()
    first = turn(acc.session, None, await port.open_items(acc.session))
    await port.submit_turn(first).result()
    label = await port.fork(first.turn_id, None, tick())
    assert (await port.session_show(acc.session, 10))["persona"] == "loud"
    assert (await port.session_show(label, 10))["persona"] == "loud"


async def test_a_worker_reports_its_result_to_its_parent_exactly_once(port: LedgerPort) -> None:
    parent = await ingest(port, inbound("m1"))
    done = await port.dispatch(
        parent=parent.session,
        parent_turn=None,
        tool_call=None,
        target={"kind": "new_session"},
        task="count the stars",
        persona=None,
        limits=LIMITS,
        now=tick(),
    )
    [task] = await port.open_items(done.session)
    assert (task.id, task.dispatch_id) == (done.item.id, done.dispatch)
    rec = turn(done.session, None, [task], "about a billion")
    [result] = await port.submit_turn(rec).result()
    assert result.session == parent.session and result.source == "worker"
    assert "about a billion" in result.content
    assert await port.sweep_worker_timeouts(tick() + 10**9) == []  # already ended
    assert [i.id for i in await port.open_items(parent.session)] == [parent.item, result.id]


async def test_a_worker_past_its_deadline_times_out_once(port: LedgerPort) -> None:
    parent = await ingest(port, inbound("m1"))
    now = tick()
    done = await port.dispatch(
        parent=parent.session,
        parent_turn=None,
        tool_call=None,
        target={"kind": "new_session"},
        task="never ends",
        persona=None,
        limits=LIMITS,
        now=now,
    )
    assert await port.sweep_worker_timeouts(now + 1) == []  # before the deadline
    [result] = await port.sweep_worker_timeouts(now + LIMITS.timeout_ms + 1)
    assert result.session == parent.session and "timed_out" in result.content
    assert await port.sweep_worker_timeouts(now + LIMITS.timeout_ms + 2) == []
    late = turn(done.session, None, [done.item], "finally")
    assert await port.submit_turn(late).result() == []  # no second result


async def test_a_dispatch_to_an_unknown_parent_is_not_found(port: LedgerPort) -> None:
    with pytest.raises(NotFound):
        await port.dispatch(
            parent="dm:nobody",
            parent_turn=None,
            tool_call=None,
            target={"kind": "new_session"},
            task="x",
            persona=None,
            limits=LIMITS,
            now=tick(),
        )
    assert (await port.counts())["sessions"] == 0


async def test_settled_returns_after_what_was_submitted_before(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    pending = port.submit_item_status([(acc.item, "dropped", "cap:old")], tick())
    await port.settled()
    assert pending.done
    assert await port.open_items() == []


async def test_a_reply_is_claimed_by_one_node_until_its_lease_ends(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    rec = turn(acc.session, None, await port.open_items(acc.session), outbox_channel="chat")
    await port.submit_turn(rec).result()
    assert rec.outbox is not None
    out_id = rec.outbox[0]
    now = tick()
    [row] = await port.claimable_outbox("chat", "a", now, 1_000, 10)
    assert row.out_id == out_id
    assert await port.submit_claim_outbox([out_id], "a", now, 1_000).result() == [out_id]
    # b may neither see nor take a's fresh claim; a renews its own.
    assert await port.claimable_outbox("chat", "b", now + 10, 1_000, 10) == []
    assert await port.submit_claim_outbox([out_id], "b", now + 10, 1_000).result() == []
    assert await port.submit_claim_outbox([out_id], "a", now + 20, 1_000).result() == [out_id]
    # Past the lease, b takes it over; a delivered reply is nobody's to claim.
    later = now + 20 + 1_001
    assert [r.out_id for r in await port.claimable_outbox("chat", "b", later, 1_000, 10)] == [
        out_id
    ]
    assert await port.submit_claim_outbox([out_id], "b", later, 1_000).result() == [out_id]
    assert await port.submit_delivered([out_id], later).result() == 1
    assert await port.claimable_outbox("chat", "b", later + 5_000, 1_000, 10) == []
    assert await port.submit_claim_outbox([out_id], "b", later + 5_000, 1_000).result() == []


async def test_claimable_replies_page_on_after_a_key(port: LedgerPort) -> None:
    out_ids = []
    for n in range(3):
        acc = await ingest(port, inbound(f"m{n}", sender=f"p{n}"))
        rec = turn(acc.session, None, await port.open_items(acc.session), outbox_channel="chat")
        await port.submit_turn(rec).result()
        assert rec.outbox is not None
        out_ids.append(rec.outbox[0])
    now = tick()
    first = await port.claimable_outbox("chat", "a", now, 1_000, 2)
    assert [r.out_id for r in first] == out_ids[:2]
    rest = await port.claimable_outbox("chat", "a", now, 1_000, 2, first[-1].key)
    assert [r.out_id for r in rest] == out_ids[2:]
    assert await port.claimable_outbox("chat", "a", now, 1_000, 2, rest[-1].key) == []


async def test_a_known_head_skips_the_thread_until_the_head_moves(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    [item] = await port.open_items(acc.session)
    first = turn(acc.session, None, [item], "hi alice")
    await port.submit_turn(first).result()
    kept = await port.session_start(acc.session, known_head=first.turn_id)
    assert kept.known and kept.thread is None and kept.seed is None
    assert (kept.start.head, kept.start.turns) == (first.turn_id, 1)
    assert kept.start.route == ("chat", "dm", "alice", None)
    elsewhere = await port.session_start(acc.session, known_head="another-head")
    assert not elsewhere.known and elsewhere.thread is not None
    await ingest(port, inbound("m2"))
    [second_item] = await port.open_items(acc.session)
    second = turn(acc.session, first.turn_id, [second_item], "again")
    await port.submit_turn(second).result()
    moved = await port.session_start(acc.session, known_head=first.turn_id)
    assert not moved.known and moved.thread is not None
    assert [t.id for t in moved.thread.turns] == [first.turn_id, second.turn_id]


async def test_a_turn_whose_inputs_another_turn_consumed_is_refused(port: LedgerPort) -> None:
    """Two attempts of one turn (a retry under the Temporal runtime): the late one is
    refused, and changes nothing, even where the head race alone would let it pass. The
    fence is the items' own update (ledger/turns.py)."""
    acc = await ingest(port, inbound("m1"))
    await ingest(port, inbound("m2"))
    first, second = await port.open_items(acc.session)
    retry = new_id()
    await port.submit_mark_running(retry, [first.id, second.id], tick()).result()
    held = await port.open_items(acc.session)
    won = turn(acc.session, None, held, "the answer")
    won.turn_id = retry
    assert await port.submit_turn(won).result() == []
    stale = turn(acc.session, retry, [first, second], "late answer")
    with pytest.raises(HeadMoved, match="consumed by another turn"):
        await port.submit_turn(stale).result()
    shown = await port.session_show(acc.session, 10)
    assert shown["head"] == retry
    assert [t["id"] for t in shown["turns"]] == [retry]
    assert await port.open_items(acc.session) == []
    partly = turn(acc.session, retry, [second], "also late")  # one input of two is enough
    with pytest.raises(HeadMoved):
        await port.submit_turn(partly).result()
