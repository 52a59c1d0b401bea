"""Threads and resets on the real daemon, on asyncio and trio: `/new` and `/reset`,
`session.reset`, `session.threads`, the reset policies (idle, daily, max_turns with
its carry-over), timers not counting as activity, old threads still searchable and
forkable, `item.cancel` and the `brokerctl` commands."""

from __future__ import annotations

import signal
import subprocess
from typing import Any

import anyio
import orjson
import pytest

from tests import ledger_db
from tests.conftest import DaemonFactory
from tests.ctl import in_process
from tests.harness import DaemonProcess
from tests.integration.wire import Adapter, add_routes, op, query, uniq, wait_db, wait_until
from wire.client import BrokerError

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]
QUIET = {"log_level": "warning", "queue": {"idle_stop_s": 5.0}}


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    """The daemon's event loop: every test runs against both."""
    return str(request.param)


def ctl(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return in_process("--config", str(d.config_path), *args)


async def say(a: Adapter, sender: str, text: str, mode: str = "followup") -> dict[str, Any]:
    """Send a DM, wait for its final reply and confirm it; the ack."""
    msg_id = uniq("m")
    ack = await a.send_inbound(msg_id, text, sender, mode=mode)
    reply = await a.deliver(msg_id=msg_id, status="final")
    await a.confirm(reply["out_id"])
    return ack


def turn_of(d: DaemonProcess, item: str) -> tuple[str, str | None, str, str | None]:
    """(turn, parent, type, reason) of the turn that ran `item`."""
    rows = query(
        d,
        "SELECT t.id, t.parent_id, t.type, t.reason FROM queue_items q"
        " JOIN turns t ON t.id = q.turn_id WHERE q.id = ?",
        item,
    )
    assert len(rows) == 1, rows
    return rows[0]


async def threads(d: DaemonProcess, session: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = await op(d, "session.threads", session=session)
    return rows


async def test_new_and_reset_start_empty_threads(make_daemon: DaemonFactory, backend: str) -> None:
    d = make_daemon({**QUIET, "log_level": "info"}, backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        first = await say(a, "+1", "one")
        session = first["session"]
        await say(a, "+1", "/new")
        second = await say(a, "+1", "two")
        await say(a, "+1", "/reset")
        third = await say(a, "+1", "three")
    turn1, parent1, _, _ = turn_of(d, first["item"])
    turn2, parent2, _, _ = turn_of(d, second["item"])
    turn3, parent3, _, _ = turn_of(d, third["item"])
    assert (parent1, parent2, parent3) == (None, None, None)
    listed = await threads(d, session)
    assert [(t["thread"], t["reason"], t["turns"], t["head"]) for t in listed] == [
        (1, "first", 1, turn1),
        (2, "new", 1, turn2),
        (3, "new", 1, turn3),
    ]
    assert listed[0]["ended_at"] == listed[1]["started_at"] <= listed[2]["started_at"]
    assert listed[2]["ended_at"] is None
    [row] = [s for s in await op(d, "sessions.list") if s["label"] == session]
    assert row["thread"] == 3
    started = [orjson.loads(line) for line in d.log_lines() if "thread started" in line]
    assert [(e["session"], e["previous"], e["thread"], e["reason"]) for e in started] == [
        (session, 1, 2, "new"),
        (session, 2, 3, "new"),
    ]
    shown = await op(d, "session.show", session=session)
    assert [t["id"] for t in shown["turns"]][-1] == turn3


async def test_session_reset_op_and_its_bad_input(make_daemon: DaemonFactory, backend: str) -> None:
    d = make_daemon(QUIET, backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        first = await say(a, "+1", "before the reset")
        session = first["session"]
        assert await op(d, "session.reset", session=session, reason="test") == {
            "label": session,
            "thread": 2,
        }
        after = await say(a, "+1", "after the reset")
    turn1, _, _, _ = turn_of(d, first["item"])
    turn2, parent2, _, _ = turn_of(d, after["item"])
    assert parent2 is None
    listed = await threads(d, session)
    assert [(t["reason"], t["turns"], t["head"]) for t in listed] == [
        ("first", 1, turn1),
        ("operator", 1, turn2),
    ]
    for name, args, code, field in [
        ("session.reset", {"session": "dm:ent_nobody"}, "not_found", "session"),
        ("session.reset", {}, "invalid", "session"),
        ("session.reset", {"session": session, "reason": 5}, "invalid", "reason"),
        ("session.threads", {"session": "dm:ent_nobody"}, "not_found", "session"),
    ]:
        with pytest.raises(BrokerError) as caught:
            await op(d, name, **args)
        assert (caught.value.code, caught.value.frame.get("field")) == (code, field), name
    assert len(await threads(d, session)) == 2  # refused resets changed nothing


async def test_idle_reset_runs_the_message_as_the_new_threads_first_turn(
    make_daemon: DaemonFactory, backend: str
) -> None:
    d = make_daemon({**QUIET, "log_level": "info", "reset": {"idle_s": 0.3}}, backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        first = await say(a, "+1", "hello")
        session = first["session"]
        quick = await say(a, "+1", "quick")  # within idle_s of the first
        await anyio.sleep(0.35)
        late = await say(a, "+1", "after a silence")
    _, quick_parent, _, _ = turn_of(d, quick["item"])
    late_turn, late_parent, _, _ = turn_of(d, late["item"])
    assert quick_parent is not None and late_parent is None
    listed = await threads(d, session)
    assert [(t["reason"], t["turns"]) for t in listed] == [("first", 2), ("idle", 1)]
    assert listed[1]["head"] == late_turn
    assert query(d, "SELECT item_id FROM threads WHERE session_label = ?", session) == [
        (late["item"],)
    ]
    [logged] = [orjson.loads(line) for line in d.log_lines() if "thread reset" in line]
    assert (logged["session"], logged["previous"], logged["thread"], logged["reason"]) == (
        session,
        1,
        2,
        "idle",
    )


async def test_messages_waiting_before_the_reset_finish_on_the_old_thread(
    make_daemon: DaemonFactory, backend: str
) -> None:
    slow = {"chunks": 3, "delay_ms": 200}  # 0.6 s a turn
    d = make_daemon({**QUIET, "engine": slow, "reset": {"idle_s": 0.3}}, backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        busy = await a.send_inbound(uniq("m"), "a long one", "+1", mode="followup")
        waiting = await a.send_inbound(uniq("m"), "waits behind it", "+1", mode="followup")
        await anyio.sleep(0.35)  # idle since `waiting`, which still waits
        late = await a.send_inbound(uniq("m"), "after a silence", "+1", mode="followup")
        await a.deliver(msg_id=late["msg_id"], status="final")
    busy_turn = turn_of(d, busy["item"])[0]
    waiting_turn, waiting_parent, _, _ = turn_of(d, waiting["item"])
    late_turn, late_parent, _, _ = turn_of(d, late["item"])
    assert (waiting_parent, late_parent) == (busy_turn, None)
    listed = await threads(d, busy["session"])
    assert [(t["reason"], t["turns"], t["head"]) for t in listed] == [
        ("first", 2, waiting_turn),
        ("idle", 1, late_turn),
    ]


async def test_a_timer_turn_is_not_activity(make_daemon: DaemonFactory, backend: str) -> None:
    d = make_daemon({**QUIET, "reset": {"idle_s": 0.4}}, backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        first = await say(a, "+1", "hello")
        session = first["session"]
        await op(d, "timer.add", session=session, text="heartbeat", in_s=0.1)
        beat = await a.deliver(session=session, status="final")  # the timer's turn, in 0.1 s
        await a.confirm(beat["out_id"])
        await wait_db(
            d, "SELECT count(*) FROM turns WHERE session_label = ?", (session,), 2, within=5
        )
        await anyio.sleep(0.35)  # 0.45 s after the person's message, 0.35 s after the timer
        late = await say(a, "+1", "still there?")
    listed = await threads(d, session)
    assert [(t["reason"], t["turns"]) for t in listed] == [("first", 2), ("idle", 1)]
    assert turn_of(d, late["item"])[1] is None


async def test_a_route_rule_overrides_the_policy_and_a_reload_applies_it(
    make_daemon: DaemonFactory, backend: str
) -> None:
    d = make_daemon({**QUIET, "log_level": "info"}, backend=backend)
    add_routes(d, [{"name": "sms-resets", "match": {"channel": ["sms"]}, "reset": {"idle_s": 0.2}}])
    d.restart()
    async with await Adapter.connect(d, "sms") as sms, await Adapter.connect(d, "chat") as chat:
        on_sms = (await say(sms, "+1", "hello"))["session"]
        on_chat = (await say(chat, "bob", "hello"))["session"]
        await anyio.sleep(0.25)
        await say(sms, "+1", "later")
        await say(chat, "bob", "later")  # [reset] sets nothing: no reset here
        assert [t["reason"] for t in await threads(d, on_sms)] == ["first", "idle"]
        assert [t["reason"] for t in await threads(d, on_chat)] == ["first"]
        with d.config_path.open("a") as fh:  # [reset] for every route, on reload
            fh.write("\n[reset]\nmax_turns = 2\n")
        assert d.proc is not None
        d.proc.send_signal(signal.SIGHUP)
        await wait_until(lambda: _logged(d, '"reloaded"'), "the reload")
        await say(chat, "bob", "third")
    assert [t["reason"] for t in await threads(d, on_chat)] == ["first", "turn_limit"]


async def _logged(d: DaemonProcess, text: str) -> bool:
    return text in d.log()


async def test_daily_reset_after_the_local_time(make_daemon: DaemonFactory, backend: str) -> None:
    d = make_daemon(
        {**QUIET, "reset": {"daily_at": "00:00", "timezone": "Europe/Berlin"}}, backend=backend
    )
    async with await Adapter.connect(d, "sms") as a:
        first = await say(a, "+1", "yesterday")
        session = first["session"]
        same_day = await say(a, "+1", "same day")
    assert d.terminate() == 0
    # The conversation was a day earlier: move its times back, as a clock would have.
    with ledger_db.connect(d.ledger) as db:
        db.execute(
            "UPDATE person_activity SET at = at - 86400000 WHERE session_label = ?", (session,)
        )
    d.start()
    async with await Adapter.connect(d, "sms") as a:
        today = await say(a, "+1", "today")
        later = await say(a, "+1", "later today")
    assert turn_of(d, same_day["item"])[1] is not None
    assert turn_of(d, today["item"])[1] is None
    assert turn_of(d, later["item"])[1] == turn_of(d, today["item"])[0]
    assert [(t["reason"], t["turns"]) for t in await threads(d, session)] == [
        ("first", 2),
        ("daily", 2),
    ]


async def test_max_turns_rolls_over_carrying_the_summary(
    make_daemon: DaemonFactory, backend: str
) -> None:
    d = make_daemon({**QUIET, "reset": {"max_turns": 3}}, backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        first = await say(a, "+1", "the launch code is swordfish")
        session = first["session"]
        await say(a, "+1", "and the meeting is on tuesday")
        compacted = await op(d, "session.compact", session=session)
        [(summary,)] = query(
            d, "SELECT summary FROM compactions WHERE turn_id = ?", compacted["turn"]
        )
        rolled = await say(a, "+1", "what did we say?")
        again = await say(a, "+1", "and then?")
    rolled_turn, carry, _, _ = turn_of(d, rolled["item"])
    assert carry is not None
    [(kind, parent, reason, output)] = query(
        d, "SELECT type, parent_id, reason, output FROM turns WHERE id = ?", carry
    )
    assert (kind, parent, reason) == ("compaction", None, "rollover")
    assert summary in output
    [(trigger, through)] = query(
        d, "SELECT trigger, summarized_through_turn_id FROM compactions WHERE turn_id = ?", carry
    )
    assert (trigger, through) == ("rollover", compacted["turn"])
    assert turn_of(d, again["item"])[1] == rolled_turn
    listed = await threads(d, session)
    assert [(t["reason"], t["turns"]) for t in listed] == [("first", 3), ("turn_limit", 2)]
    # After a restart the new thread's context still begins from the carried summary.
    d.restart()
    async with await Adapter.connect(d, "sms") as a:
        after = await say(a, "+1", "after the restart")
    assert turn_of(d, after["item"])[1] == turn_of(d, again["item"])[0]


async def test_old_threads_stay_searchable_and_forkable(
    make_daemon: DaemonFactory, backend: str
) -> None:
    d = make_daemon(QUIET, backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        old = await say(a, "+1", "remember the zanzibar plan")
        session = old["session"]
        await say(a, "+1", "/new")
        await say(a, "+1", "something else entirely")
    hits = await op(d, "recall.search", query="zanzibar", session=session)
    old_turn = turn_of(d, old["item"])[0]
    assert old_turn in {h["turn"] for h in hits}
    fork = await op(d, "session.fork", turn=old_turn)
    shown = await op(d, "session.show", session=fork["label"])
    assert [t["id"] for t in shown["turns"]] == [old_turn]


async def test_item_cancel(make_daemon: DaemonFactory, backend: str) -> None:
    d = make_daemon({**QUIET, "engine": {"chunks": 3, "delay_ms": 150}}, backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        busy = await a.send_inbound(uniq("m"), "a slow one", "+1", mode="followup")
        session = busy["session"]
        waiting = await a.send_inbound(uniq("m"), "cancel me", "+1", mode="followup")
        kept = await a.send_inbound(uniq("m"), "keep me", "+1", mode="followup")
        await wait_db(d, "SELECT status FROM queue_items WHERE id = ?", (busy["item"],), "running")
        cancelled = await op(d, "item.cancel", session=session, item=waiting["item"])
        assert cancelled == {"item": waiting["item"], "status": "cancelled"}
        for item, code in [
            (busy["item"], "conflict"),  # running
            (waiting["item"], "conflict"),  # cancelled already
            ("01NOSUCHITEM", "not_found"),
        ]:
            with pytest.raises(BrokerError) as caught:
                await op(d, "item.cancel", session=session, item=item)
            assert (caught.value.code, caught.value.frame.get("field")) == (code, "item")
        with pytest.raises(BrokerError) as caught:
            await op(d, "item.cancel", session="dm:ent_nobody", item=busy["item"])
        assert caught.value.code == "not_found"
        await a.deliver(msg_id=kept["msg_id"], status="final", within=10)
        with pytest.raises(BrokerError) as caught:  # finished
            await op(d, "item.cancel", session=session, item=busy["item"])
        assert caught.value.code == "conflict"
    assert query(
        d, "SELECT status, reason, turn_id FROM queue_items WHERE id = ?", waiting["item"]
    ) == [("cancelled", "cancelled", None)]
    d.restart()  # a cancelled item does not come back
    await anyio.sleep(0.3)
    assert query(d, "SELECT status FROM queue_items WHERE id = ?", waiting["item"]) == [
        ("cancelled",)
    ]
    inputs = query(d, "SELECT count(*) FROM messages WHERE item_id = ?", waiting["item"])
    assert inputs == [(0,)]


async def test_cancel_races_the_actor_and_exactly_one_wins(
    make_daemon: DaemonFactory, backend: str
) -> None:
    """Cancels aimed at items as the actor takes them into turns: each item is either
    cancelled (and never runs) or answered `conflict` (and runs once)."""
    d = make_daemon({**QUIET, "engine": {"chunks": 1, "delay_ms": 5}}, backend=backend)
    answers: dict[str, str] = {}
    async with await Adapter.connect(d, "sms") as a:
        acks = [
            await a.send_inbound(uniq("m"), f"item {n}", "+1", mode="followup") for n in range(30)
        ]
        session = acks[0]["session"]
        for ack in acks:
            try:
                await op(d, "item.cancel", session=session, item=ack["item"])
                answers[ack["item"]] = "cancelled"
            except BrokerError as exc:
                answers[ack["item"]] = exc.code
        await wait_db(
            d,
            "SELECT count(*) FROM queue_items WHERE session_label = ? AND status IN"
            " ('queued', 'running')",
            (session,),
            0,
        )
    for item, answer in answers.items():
        [(status,)] = query(d, "SELECT status FROM queue_items WHERE id = ?", item)
        ran = query(
            d,
            "SELECT count(*) FROM messages m JOIN turns t ON t.id = m.turn_id"
            " WHERE m.item_id = ? AND t.status = 'completed'",
            item,
        )
        if answer == "cancelled":
            assert (status, ran) == ("cancelled", [(0,)]), item
        else:
            assert (answer, status, ran) == ("conflict", "done", [(1,)]), item
    assert set(answers.values()) <= {"cancelled", "conflict"}, answers


async def test_brokerctl_reset_threads_and_cancel(make_daemon: DaemonFactory) -> None:
    d = make_daemon({**QUIET, "queue": {"debounce_ms": 60_000}})
    async with await Adapter.connect(d, "sms") as a:
        first = await say(a, "+1", "hello")
        session = first["session"]
        done = await anyio.to_thread.run_sync(ctl, d, "reset", session, "--reason", "tidy")
        assert done.returncode == 0 and "thread 2" in done.stdout, done
        listed = await anyio.to_thread.run_sync(ctl, d, "--json", "threads", session)
        assert listed.returncode == 0 and '"operator"' in listed.stdout
        # A collect message waits out its quiet period: long enough for brokerctl.
        waiting = await a.send_inbound(uniq("m"), "to cancel", "+1", mode="collect")
        cancelled = await anyio.to_thread.run_sync(ctl, d, "cancel", session, waiting["item"])
        assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout, cancelled
        again = await anyio.to_thread.run_sync(ctl, d, "cancel", session, waiting["item"])
        assert again.returncode == 1 and "conflict" in again.stderr
        missing = await anyio.to_thread.run_sync(ctl, d, "threads", "dm:ent_nobody")
        assert missing.returncode == 1 and "not_found" in missing.stderr
