"""Replies against the real daemon: deltas and deliveries, at-least-once delivery
through the outbox, several adapters of one channel, and chat commands.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import anyio
import orjson
import pytest

from broker.deliveries import RESEND_PAGE
from tests.harness import DaemonProcess
from tests.integration.wire import (
    SLOW,
    WAIT,
    Adapter,
    Frame,
    assert_run_once_in_order,
    items,
    query,
    running_daemon,
    show,
    turns,
    uniq,
    wait_db,
)

pytestmark = pytest.mark.anyio
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

LONG = "one two three four"
ROUTES: list[dict[str, Any]] = [
    {"name": "limited", "match": {"channel": ["limited"]}, "commands": ["status"]},
]
OUTBOX_STATUS = "SELECT status FROM outbox WHERE out_id = ?"


@pytest.fixture(scope="module")
def shared() -> Iterator[DaemonProcess]:
    with running_daemon(SLOW, routes=ROUTES) as d:
        yield d


def outbox(d: DaemonProcess, session: str) -> list[tuple[Any, ...]]:
    return query(
        d,
        "SELECT out_id, turn_id, status, frame FROM outbox WHERE session_label = ? ORDER BY out_id",
        session,
    )


# -- deltas and deliver -----------------------------------------------------------


@asyncio_only
async def test_deltas_then_one_deliver_then_delivered(any_backend_daemon: DaemonProcess) -> None:
    d = any_backend_daemon
    sender, m = uniq("+"), uniq("m")
    text = "the quick brown fox"
    async with await Adapter.connect(d, uniq("r")) as a:
        session = (await a.send_inbound(m, text, sender, thread_id="th-1"))["session"]
        reply = await a.deliver(session=session)
        frames = [f for f in a.seen if f["type"] in ("delta", "deliver")]
        assert query(d, OUTBOX_STATUS, reply["out_id"]) == [("pending",)]
        await a.confirm(reply["out_id"])
        await wait_db(d, OUTBOX_STATUS, (reply["out_id"],), "delivered")

    deltas, last = frames[:-1], frames[-1]
    assert last is reply and len(deltas) == 3  # engine.chunks defaults to 3
    assert {(f["type"], f["out_id"], f["session"]) for f in deltas} == {
        ("delta", reply["out_id"], session)
    }
    assert "".join(f["text"] for f in deltas) == text == reply["text"]
    (turn,) = turns(d, session)
    assert reply == {
        "type": "deliver",
        "out_id": reply["out_id"],
        "session": session,
        "turn": turn["id"],
        "peer_kind": "dm",
        "peer_id": sender,
        "thread_id": "th-1",
        "in_reply_to": [m],
        "text": text,
        "status": "final",
    }
    ((out_id, turn_id, status, frame),) = outbox(d, session)
    assert (out_id, turn_id, status) == (reply["out_id"], turn["id"], "delivered")
    assert orjson.loads(frame) == reply
    assert query(d, "SELECT delivered_at IS NOT NULL FROM outbox WHERE out_id = ?", out_id) == [
        (1,)
    ]


@asyncio_only
async def test_in_reply_to_lists_a_batch_in_arrival_order(shared: DaemonProcess) -> None:
    sender = uniq("+")
    msgs = [uniq("m") for _ in range(3)]
    async with await Adapter.connect(shared, uniq("r")) as a:
        for n, m in enumerate(msgs):
            session = (await a.send_inbound(m, f"p{n}", sender, mode="collect"))["session"]
        reply = await a.deliver(session=session)
    assert reply["in_reply_to"] == msgs and reply["text"] == "p0\np1\np2"


# -- at least once ----------------------------------------------------------------


@asyncio_only
async def test_unconfirmed_deliver_is_resent_until_confirmed(shared: DaemonProcess) -> None:
    sender, channel = uniq("+"), uniq("r")
    m = uniq("m")
    async with await Adapter.connect(shared, channel) as a:
        session = (await a.send_inbound(m, "x", sender))["session"]
        first = await a.deliver(session=session)
    # Gone without confirming: the next adapter of the channel gets it again.
    async with await Adapter.connect(shared, channel) as a:
        again = await a.deliver(session=session)
        assert again == first
        await a.confirm(again["out_id"])
        await wait_db(shared, OUTBOX_STATUS, (first["out_id"],), "delivered")
    # Confirmed: not sent a third time.
    await assert_not_resent(shared, channel, sender, session, first["out_id"])


async def assert_not_resent(
    d: DaemonProcess, channel: str, sender: str, session: str, out_id: str
) -> None:
    """A fresh adapter of `channel` does not get `out_id`. A new reply marks the point
    where a resend would have arrived already (resends go out right after welcome)."""
    async with await Adapter.connect(d, channel) as a:
        later = uniq("m")
        await a.send_inbound(later, "y", sender)
        new = await a.deliver(session=session)
        assert new["in_reply_to"] == [later]
        assert [f for f in a.seen if f.get("out_id") == out_id] == []


@asyncio_only
async def test_a_backlog_longer_than_a_page_reaches_the_next_adapter_whole(
    any_backend_daemon: DaemonProcess,
) -> None:
    """Replies nobody confirmed, more than one resend page of them: the next adapter
    of the channel gets every one, once, oldest first (on both daemon backends)."""
    d = any_backend_daemon
    channel, count = uniq("r"), RESEND_PAGE + 150
    async with await Adapter.connect(d, channel) as a:  # never confirms
        for start in range(0, count, 100):
            msgs = [uniq("m") for _ in range(start, min(count, start + 100))]
            await a.client.send_raw(b"".join(inbound_line(m) for m in msgs))
            for m in msgs:
                # A hundred new sessions at once: on PostgreSQL each takes its round
                # trips, which a loaded 2-core machine stretches past a single WAIT.
                ack = await a.expect(functools.partial(answers, f"r-{m}"), within=4 * WAIT)
                assert ack["type"] == "ack", ack
        pending = "SELECT count(*) FROM outbox WHERE channel = ? AND status = 'pending'"
        await wait_db(d, pending, (channel,), count, within=4 * WAIT)
    owed = [
        r[0]
        for r in query(
            d,
            "SELECT out_id FROM outbox WHERE channel = ? ORDER BY created_at, out_id",
            channel,
        )
    ]
    async with await Adapter.connect(d, channel) as b:
        got: list[str] = []
        with anyio.fail_after(4 * WAIT):
            while len(got) < count:
                frame = await b.deliver()
                got.append(frame["out_id"])
                await b.confirm(frame["out_id"])
        late = [f for f in await b.read_for(0.3) if f.get("type") == "deliver"]
    assert got == owed and not late
    await wait_db(d, pending, (channel,), 0)


def answers(req: str, frame: Frame) -> bool:
    return frame.get("req") == req


def inbound_line(msg_id: str) -> bytes:
    """A DM from a sender of its own (so a session of its own), acked as `r-<msg_id>`."""
    frame = {
        "type": "inbound",
        "req": f"r-{msg_id}",
        "msg_id": msg_id,
        "sender_id": f"+{msg_id}",
        "peer_kind": "dm",
        "text": "x",
    }
    return orjson.dumps(frame) + b"\n"


async def test_a_confirmed_reply_is_not_resent_before_its_record_commits(
    shared: DaemonProcess,
) -> None:
    """Confirmations are recorded by a lazy writer job (it may wait for company);
    meanwhile an adapter that connects must not get the reply again."""
    sender, channel = uniq("+"), uniq("r")
    async with await Adapter.connect(shared, channel) as a:
        session = (await a.send_inbound(uniq("m"), "x", sender))["session"]
        first = await a.deliver(session=session)
        await a.confirm(first["out_id"])
    # At once, before the confirmation's job has had its wait.
    await assert_not_resent(shared, channel, sender, session, first["out_id"])
    await wait_db(shared, OUTBOX_STATUS, (first["out_id"],), "delivered")


@asyncio_only
async def test_deliver_moves_to_another_adapter_when_its_own_goes_away(
    shared: DaemonProcess,
) -> None:
    channel, sender = uniq("r"), uniq("+")
    a1 = await Adapter.connect(shared, channel)
    a2 = await Adapter.connect(shared, channel)
    try:
        session = (await a1.send_inbound(uniq("m"), "x", sender))["session"]
        got: list[tuple[Adapter, Frame]] = []

        async def watch(a: Adapter, scope: anyio.CancelScope) -> None:
            got.append((a, await a.deliver(session=session)))
            scope.cancel()

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch, a1, tg.cancel_scope)
                tg.start_soon(watch, a2, tg.cancel_scope)
        ((went_to, first),) = got
        other = a2 if went_to is a1 else a1
        await went_to.aclose()  # gone without confirming
        again = await other.deliver(session=session)
        assert again == first
    finally:
        await a1.aclose()
        await a2.aclose()


@asyncio_only
async def test_replies_wait_in_the_ledger_until_an_adapter_connects(
    shared: DaemonProcess,
) -> None:
    sender, channel = uniq("+"), uniq("r")
    m = uniq("m")
    async with await Adapter.connect(shared, channel) as a:
        session = (await a.send_inbound(m, LONG, sender))["session"]
    # Nobody of the channel is connected while the turn runs and ends.
    await wait_db(
        shared, "SELECT status FROM outbox WHERE session_label = ?", (session,), "pending"
    )
    async with await Adapter.connect(shared, channel) as a:
        reply = await a.deliver(session=session)
        await a.confirm(reply["out_id"])
        await wait_db(shared, OUTBOX_STATUS, (reply["out_id"],), "delivered")
    assert reply["in_reply_to"] == [m] and reply["text"] == LONG
    # A connection of another channel never sees it.
    async with await Adapter.connect(shared, uniq("r")) as other:
        assert await other.read_for(0.2) == []


@asyncio_only
async def test_two_adapters_of_a_channel_each_session_sticks_to_one(
    shared: DaemonProcess,
) -> None:
    channel = uniq("r")
    senders = [uniq("+") for _ in range(6)]
    expected = 2 * len(senders)
    async with (
        await Adapter.connect(shared, channel) as a1,
        await Adapter.connect(shared, channel) as a2,
    ):
        sessions = set()
        for s in senders:
            for n in range(2):
                ack = await a1.send_inbound(uniq("m"), f"{s}-{n}", s, mode="followup")
                sessions.add(ack["session"])
        got: dict[int, list[Frame]] = {1: [], 2: []}
        delivered = 0

        async def read(n: int, a: Adapter, scope: anyio.CancelScope) -> None:
            nonlocal delivered
            while True:
                f = await a.expect(lambda f: f.get("type") in ("delta", "deliver"))
                got[n].append(f)
                if f["type"] == "deliver":
                    delivered += 1
                    if delivered == expected:
                        scope.cancel()

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read, 1, a1, tg.cancel_scope)
                tg.start_soon(read, 2, a2, tg.cancel_scope)

    for session in sessions:
        on = {n for n, frames in got.items() if any(f["session"] == session for f in frames)}
        assert len(on) == 1, f"{session} answered on adapters {on}"
        (n,) = on
        delivers = [f for f in got[n] if f["type"] == "deliver" and f["session"] == session]
        assert len(delivers) == 2


# -- chat commands ----------------------------------------------------------------


async def command(a: Adapter, sender: str, text: str) -> tuple[str, Frame]:
    """Send a chat command; (its msg_id, the reply)."""
    m = uniq("c")
    session = (await a.send_inbound(m, text, sender))["session"]
    reply = await a.deliver(session=session, msg_id=m)
    assert reply["turn"] is None and reply["in_reply_to"] == [m] and reply["status"] == "final"
    return m, reply


def assert_never_ran(d: DaemonProcess, session: str, msg_id: str, reason: str) -> None:
    """A chat command: done with its reason, no turn, never an engine input."""
    assert items(d, session)[msg_id] == ("done", reason, None)
    assert query(d, "SELECT count(*) FROM messages WHERE msg_id = ?", msg_id) == [(0,)]
    assert all(msg_id not in t["inputs"] for t in turns(d, session))


@asyncio_only
async def test_status_reports_state_and_backlog_without_a_turn(shared: DaemonProcess) -> None:
    sender = uniq("+")
    run, waiting = uniq("m"), uniq("m")
    async with await Adapter.connect(shared, uniq("r")) as a:
        session = (await a.send_inbound(run, LONG, sender, mode="followup"))["session"]
        await a.delta(session=session)
        await a.send_inbound(waiting, "w", sender, mode="followup")
        status, reply = await command(a, sender, "/status")
        await a.deliver(session=session, msg_id=waiting)
    assert "state: streaming" in reply["text"] and "waiting: 1" in reply["text"]
    assert_never_ran(shared, session, status, "command:status")
    assert [t["inputs"] for t in turns(shared, session)] == [[run], [waiting]]
    assert [(r[1], r[2]) for r in outbox(shared, session) if r[0] == reply["out_id"]] == [
        (None, "pending")
    ]
    assert_run_once_in_order(shared, session, [run, waiting])


@asyncio_only
async def test_status_as_a_first_message_is_still_a_command(shared: DaemonProcess) -> None:
    """The first message of a session starts its actor; a command must not reach the engine."""
    sender = uniq("+")
    async with await Adapter.connect(shared, uniq("r")) as a:
        status, reply = await command(a, sender, "/status")
    assert "state: idle" in reply["text"] and "waiting: 0" in reply["text"]
    assert_never_ran(shared, reply["session"], status, "command:status")
    assert turns(shared, reply["session"]) == []


@asyncio_only
async def test_queue_command_sets_and_resets_the_session_mode(shared: DaemonProcess) -> None:
    sender = uniq("+")
    override = "SELECT queue_override FROM sessions WHERE label = ?"
    async with await Adapter.connect(shared, uniq("r")) as a:
        cmd, reply = await command(a, sender, "/queue collect debounce:300")
        session = reply["session"]
        assert reply["text"] == "Queue settings: mode=collect, debounce_ms=300"
        await wait_db(shared, override, (session,), '{"mode":"collect","debounce_ms":300}')
        batch = [uniq("m") for _ in range(3)]
        for n, m in enumerate(batch):
            await a.send_inbound(m, f"b{n}", sender)  # no queue_mode: the session's wins
        collected = await a.deliver(session=session)

        reset, reply = await command(a, sender, "/queue reset")
        assert reply["text"] == "Queue settings reset to the defaults."
        await wait_db(shared, override, (session,), None)
        # Back to the default for people, interrupt: a second message cuts the first.
        first, second = uniq("m"), uniq("m")
        await a.send_inbound(first, LONG, sender)
        await a.delta(session=session)
        await a.send_inbound(second, "s", sender)
        cut = await a.deliver(session=session, status="aborted")
        final = await a.deliver(session=session, status="final")
    assert collected["in_reply_to"] == batch
    assert cut["in_reply_to"] == [first] and final["in_reply_to"] == [first, second]
    assert_never_ran(shared, session, cmd, "command:queue")
    assert_never_ran(shared, session, reset, "command:queue")
    assert [(t["type"], t["status"], t["reason"]) for t in turns(shared, session)] == [
        ("queue_batch", "completed", None),
        ("turn", "aborted", "interrupt"),
        ("queue_batch", "completed", None),
    ]
    assert_run_once_in_order(shared, session, [*batch, first, second])


@asyncio_only
async def test_stop_aborts_the_running_turn_and_cancels_its_inputs(
    shared: DaemonProcess,
) -> None:
    sender = uniq("+")
    run, waiting = uniq("m"), uniq("m")
    async with await Adapter.connect(shared, uniq("r")) as a:
        session = (await a.send_inbound(run, LONG, sender, mode="followup"))["session"]
        await a.delta(session=session)
        await a.send_inbound(waiting, "w", sender, mode="followup")
        stop, reply = await command(a, sender, "/stop")
        cut = await a.deliver(session=session, msg_id=run)
        after = await a.deliver(session=session, msg_id=waiting)
        idle_stop, idle_reply = await command(a, sender, "/stop")
    assert reply["text"] == "Stopped."
    assert idle_reply["text"] == "Nothing is running."
    assert cut["status"] == "aborted" and LONG.startswith(cut["text"]) and cut["text"] != LONG
    assert after["status"] == "final" and after["in_reply_to"] == [waiting]

    stopped, ran = turns(shared, session)
    assert (stopped["status"], stopped["reason"], stopped["inputs"]) == ("aborted", "stop", [run])
    assert items(shared, session)[run] == ("cancelled", "stopped", stopped["id"])
    assert ran["inputs"] == [waiting] and ran["status"] == "completed"
    assert_never_ran(shared, session, stop, "command:stop")
    assert_never_ran(shared, session, idle_stop, "command:stop")
    assert_run_once_in_order(shared, session, [waiting])
    shown = await show(shared, session)
    cancelled = [q for q in shown["queued"] if q["msg_id"] == run]
    assert [(q["status"], q["reason"]) for q in cancelled] == [("cancelled", "stopped")]


@asyncio_only
async def test_new_starts_a_fresh_thread(shared: DaemonProcess) -> None:
    sender = uniq("+")
    old, new = uniq("m"), uniq("m")
    async with await Adapter.connect(shared, uniq("r")) as a:
        session = (await a.send_inbound(old, "old", sender))["session"]
        await a.deliver(session=session)
        cmd, reply = await command(a, sender, "/new")
        await a.send_inbound(new, "new", sender)
        await a.deliver(session=session, msg_id=new)
    assert reply["text"] == "Starting a new conversation thread."
    first, second = turns(shared, session)  # the old turn stays in the tree
    assert first["inputs"] == [old] and second["inputs"] == [new]
    assert second["parent_id"] is None
    assert second["prompt_tokens"] == 1  # no history from the old thread
    shown = await show(shared, session)
    assert shown["head"] == second["id"]
    assert [t["id"] for t in shown["turns"]] == [second["id"]]
    history = query(
        shared,
        "SELECT turn_id, prev_turn_id, reason FROM session_history"
        " WHERE session_label = ? ORDER BY id",
        session,
    )
    assert history == [
        (first["id"], None, "turn"),
        (None, first["id"], "new_thread"),
        (second["id"], None, "turn"),
    ]
    assert_never_ran(shared, session, cmd, "command:new")


@asyncio_only
async def test_command_refused_by_policy_changes_nothing(shared: DaemonProcess) -> None:
    """Rule `limited` allows only /status."""
    sender = uniq("+")
    run = uniq("m")
    async with await Adapter.connect(shared, "limited") as a:
        session = (await a.send_inbound(run, LONG, sender, mode="followup"))["session"]
        await a.delta(session=session)
        stop, refused = await command(a, sender, "/stop")
        status, allowed = await command(a, sender, "/status")
        reply = await a.deliver(session=session, msg_id=run)
    assert refused["text"] == "/stop is not allowed for you here."
    assert "state: streaming" in allowed["text"]
    assert reply["status"] == "final" and reply["text"] == LONG  # not stopped
    assert_never_ran(shared, session, stop, "command:refused")
    assert_never_ran(shared, session, status, "command:status")
    assert_run_once_in_order(shared, session, [run])


async def test_malformed_queue_command_is_answered_with_its_usage(
    shared: DaemonProcess,
) -> None:
    sender = uniq("+")
    async with await Adapter.connect(shared, uniq("r")) as a:
        bogus, reply = await command(a, sender, "/queue bogus")
        bare, usage = await command(a, sender, "/queue")
        option, bad_option = await command(a, sender, "/queue collect cap:0")
    session = reply["session"]
    assert reply["text"] == (
        "unknown queue mode 'bogus'; use one of interrupt, steer, followup, collect, queue"
    )
    assert usage["text"].startswith("usage: /queue <mode>")
    assert bad_option["text"] == "cap needs a positive whole number, got '0'"
    for m in (bogus, bare, option):
        assert_never_ran(shared, session, m, "command:invalid")
    assert query(shared, "SELECT queue_override FROM sessions WHERE label = ?", session) == [
        (None,)
    ]
