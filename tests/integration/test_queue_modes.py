"""Queue modes against the real daemon: what a message does to a busy session.

Every scenario runs on one session (a fresh sender) of a shared daemon whose
echo engine streams up to 4 deltas 120 ms apart, so a turn lasts long enough for
messages to arrive while it runs. Interleaving is event driven: the test waits
for the running turn's first delta before it sends the next message. Each test
checks the wire (deltas, deliveries, `in_reply_to`), the ledger (turns, their
inputs, queue items) and, where the protocol names it, `session.show`; and
each ends with the invariant of the "Queue modes" table: every message is an
input of exactly one completed turn, and the completed turns consume them in
arrival order.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from tests.integration.wire import (
    SLOW,
    Adapter,
    Frame,
    assert_run_once_in_order,
    completed_inputs,
    items,
    query,
    running_daemon,
    show,
    turns,
    uniq,
    wait_item,
    wait_until,
)
from wire.client import BrokerError

pytestmark = pytest.mark.anyio
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

LONG = "one two three four"  # 4 chunks of the echo engine: about 500 ms
ROUTES: list[dict[str, Any]] = [
    {"name": "strict", "match": {"channel": ["strict"]}, "queue": {"allowed": ["followup"]}},
    {"name": "collecting", "match": {"channel": ["collecting"]}, "queue": {"mode": "collect"}},
]


@pytest.fixture(scope="module")
def shared() -> Iterator[DaemonProcess]:
    with running_daemon(SLOW, routes=ROUTES) as d:
        yield d


@pytest.fixture(scope="module")
def capped() -> Iterator[DaemonProcess]:
    """At most two messages wait; by default the oldest goes."""
    config = {**SLOW, "queue": {**SLOW["queue"], "cap": 2, "drop": "old"}}
    with running_daemon(config) as d:
        yield d


async def adapter(d: DaemonProcess, channel: str | None = None) -> Adapter:
    return await Adapter.connect(d, channel or uniq("q"))


def texts_of(frames: list[Frame], out_id: str) -> str:
    return "".join(f["text"] for f in frames if f["type"] == "delta" and f["out_id"] == out_id)


def assert_streamed(d: DaemonProcess, frames: list[Frame], out_id: str, text: str) -> None:
    """The reply's deltas spell `text`. On a pair of nodes (TEST_CLUSTER=2) a turn that
    ran on the other node streamed to that node's adapters only (docs/cluster.md,
    Limits): then none reach this adapter, and its `deliver` alone carries the text."""
    streamed = texts_of(frames, out_id)
    if d.peers and not streamed:
        return
    assert streamed == text


# -- followup / queue -------------------------------------------------------------


@asyncio_only
@pytest.mark.parametrize("mode", ["followup", "queue"])
async def test_backlog_runs_fifo_one_message_a_turn(shared: DaemonProcess, mode: str) -> None:
    sender = uniq("+")
    msgs = [uniq("m") for _ in range(4)]
    texts = [LONG, "b", "c", "d"]
    async with await adapter(shared) as a:
        session = (await a.send_inbound(msgs[0], texts[0], sender, mode=mode))["session"]
        await a.turn_runs(session)  # the first turn runs
        for m, text in zip(msgs[1:], texts[1:], strict=True):
            await a.send_inbound(m, text, sender, mode=mode)
        delivered = [await a.deliver(session=session) for _ in msgs]
    assert [f["in_reply_to"] for f in delivered] == [[m] for m in msgs]
    assert [f["text"] for f in delivered] == texts
    assert {f["status"] for f in delivered} == {"final"}

    rows = turns(shared, session)
    assert [(t["type"], t["status"], t["inputs"]) for t in rows] == [
        ("turn", "completed", [m]) for m in msgs
    ]
    assert [f["turn"] for f in delivered] == [t["id"] for t in rows]
    assert_run_once_in_order(shared, session, msgs)


# -- collect ----------------------------------------------------------------------


@asyncio_only
async def test_collect_while_idle_waits_for_quiet_then_batches(shared: DaemonProcess) -> None:
    sender = uniq("+")
    msgs = [uniq("m") for _ in range(3)]
    async with await adapter(shared) as a:
        for n, m in enumerate(msgs):
            if n:
                await anyio.sleep(0.1)  # shorter than the 300 ms quiet period
            ack = await a.send_inbound(m, f"c{n}", sender, mode="collect")
        session = ack["session"]
        reply = await a.deliver(session=session)
        before = [f for f in a.seen if f.get("type") in ("delta", "deliver")]
    assert reply["in_reply_to"] == msgs
    assert reply["text"] == "c0\nc1\nc2"
    assert {f["out_id"] for f in before} == {reply["out_id"]}  # one turn, nothing before

    (turn,) = turns(shared, session)
    assert turn["type"] == "queue_batch" and turn["status"] == "completed"
    assert turn["inputs"] == msgs
    last_received = query(
        shared, "SELECT max(received_at) FROM inbound WHERE msg_id IN (?,?,?)", *msgs
    )[0][0]
    assert turn["started_at"] - last_received >= 250  # the quiet period was waited out
    assert_run_once_in_order(shared, session, msgs)


@asyncio_only
async def test_collect_while_busy_batches_at_the_end(shared: DaemonProcess) -> None:
    sender = uniq("+")
    first, *rest = [uniq("m") for _ in range(4)]
    async with await adapter(shared) as a:
        session = (await a.send_inbound(first, LONG, sender, mode="followup"))["session"]
        await a.turn_runs(session)
        for n, m in enumerate(rest):
            await a.send_inbound(m, f"k{n}", sender, mode="collect")
        one = await a.deliver(session=session)
        two = await a.deliver(session=session)
    assert one["in_reply_to"] == [first] and one["text"] == LONG
    assert two["in_reply_to"] == rest and two["text"] == "k0\nk1\nk2"
    rows = turns(shared, session)
    assert [(t["type"], t["inputs"]) for t in rows] == [("turn", [first]), ("queue_batch", rest)]
    assert_run_once_in_order(shared, session, [first, *rest])


@asyncio_only
async def test_route_default_mode_applies_without_queue_mode(shared: DaemonProcess) -> None:
    """Rule `collecting` makes `collect` the default: three quick messages, one turn."""
    sender = uniq("+")
    msgs = [uniq("m") for _ in range(3)]
    async with await adapter(shared, "collecting") as a:
        for n, m in enumerate(msgs):
            ack = await a.send_inbound(m, f"r{n}", sender)  # no queue_mode
        session = ack["session"]
        reply = await a.deliver(session=session)
        # An explicit mode still wins over the route's default.
        solo = uniq("m")
        await a.send_inbound(solo, "s", sender, mode="followup")
        alone = await a.deliver(session=session)
    assert reply["in_reply_to"] == msgs
    assert alone["in_reply_to"] == [solo]
    assert [t["type"] for t in turns(shared, session)] == ["queue_batch", "turn"]
    assert_run_once_in_order(shared, session, [*msgs, solo])


# -- interrupt --------------------------------------------------------------------


async def interrupt_scenario(d: DaemonProcess) -> None:
    sender = uniq("+")
    first, waiting, urgent = (uniq("m") for _ in range(3))
    async with await adapter(d) as a:
        session = (await a.send_inbound(first, LONG, sender, mode="followup"))["session"]
        await a.turn_runs(session)
        await a.send_inbound(waiting, "waiting", sender, mode="followup")
        await a.send_inbound(urgent, "urgent", sender, mode="interrupt")
        aborted = await a.deliver(session=session)
        final = await a.deliver(session=session)
        # Nothing else follows: the batch runs once.
        extra = [f for f in await a.read_for(0.25) if f.get("type") == "deliver"]
        seen = a.seen
    assert extra == []
    assert aborted["status"] == "aborted" and aborted["in_reply_to"] == [first]
    partial = aborted["text"]
    assert partial and LONG.startswith(partial) and partial != LONG
    assert_streamed(d, seen, aborted["out_id"], partial)

    assert final["status"] == "final"
    assert final["in_reply_to"] == [first, waiting, urgent]
    assert final["text"] == f"{LONG}\nwaiting\nurgent"

    cut, batch = turns(d, session)
    assert (cut["status"], cut["reason"], cut["output"]) == ("aborted", "interrupt", partial)
    assert cut["inputs"] == [first] and cut["id"] == aborted["turn"]
    assert (batch["status"], batch["type"]) == ("completed", "queue_batch")
    assert batch["inputs"] == [first, waiting, urgent] and batch["parent_id"] == cut["id"]
    assert_run_once_in_order(d, session, [first, waiting, urgent])

    shown = await show(d, session)
    assert [(t["status"], t["reason"]) for t in shown["turns"]] == [
        ("aborted", "interrupt"),
        ("completed", None),
    ]


@asyncio_only
async def test_interrupt_aborts_and_reruns_everything_once(shared: DaemonProcess) -> None:
    await interrupt_scenario(shared)


# -- steer ------------------------------------------------------------------------


async def steer_scenario(d: DaemonProcess) -> None:
    sender = uniq("+")
    first, steered = uniq("m"), uniq("m")
    async with await adapter(d) as a:
        session = (await a.send_inbound(first, LONG, sender, mode="followup"))["session"]
        await a.turn_runs(session)
        await a.send_inbound(steered, "steered", sender, mode="steer")
        reply = await a.deliver(session=session)
        extra = [f for f in await a.read_for(0.25) if f.get("type") == "deliver"]
        seen = a.seen
    assert extra == []
    assert reply["status"] == "final"
    assert reply["text"] == f"{LONG}\nsteered"
    assert_streamed(d, seen, reply["out_id"], reply["text"])  # the steer: in the same turn
    assert reply["in_reply_to"] == [first, steered]

    (turn,) = turns(d, session)
    assert turn["status"] == "completed" and turn["inputs"] == [first, steered]
    done = items(d, session)
    assert done[steered] == ("done", None, turn["id"])
    assert_run_once_in_order(d, session, [first, steered])


@asyncio_only
async def test_steer_is_taken_at_the_next_chunk(shared: DaemonProcess) -> None:
    await steer_scenario(shared)


@asyncio_only
async def test_steer_with_a_backlog_acts_as_interrupt(shared: DaemonProcess) -> None:
    sender = uniq("+")
    first, waiting, steered = (uniq("m") for _ in range(3))
    async with await adapter(shared) as a:
        session = (await a.send_inbound(first, LONG, sender, mode="followup"))["session"]
        await a.turn_runs(session)
        await a.send_inbound(waiting, "waiting", sender, mode="followup")
        await a.send_inbound(steered, "steered", sender, mode="steer")
        aborted = await a.deliver(session=session)
        final = await a.deliver(session=session)
    assert aborted["status"] == "aborted" and aborted["in_reply_to"] == [first]
    assert final["in_reply_to"] == [first, waiting, steered]
    assert final["text"] == f"{LONG}\nwaiting\nsteered"
    cut, batch = turns(shared, session)
    assert (cut["status"], cut["reason"]) == ("aborted", "interrupt")
    assert batch["inputs"] == [first, waiting, steered]
    assert_run_once_in_order(shared, session, [first, waiting, steered])


# -- the cap ----------------------------------------------------------------------


async def fill(a: Adapter, sender: str, n: int, *, first_text: str = LONG) -> tuple[str, list[str]]:
    """One running turn and `n` followups sent while it runs; (session, msg_ids)."""
    msgs = [uniq("m") for _ in range(n + 1)]
    session = (await a.send_inbound(msgs[0], first_text, sender, mode="followup"))["session"]
    await a.turn_runs(session)
    for k, m in enumerate(msgs[1:], 1):
        await a.send_inbound(m, f"w{k}", sender, mode="followup")
    return session, msgs


def shown_drops(data: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        q["msg_id"]: (q["status"], q["reason"])
        for q in data["queued"]
        if q["status"] in ("dropped", "cancelled")
    }


@asyncio_only
async def test_cap_drop_old_from_config(capped: DaemonProcess) -> None:
    sender = uniq("+")
    async with await adapter(capped) as a:
        session, (run, oldest, b, c) = await fill(a, sender, 3)
        await wait_item(capped, session, oldest, ("dropped", "cap:old", None))
        shown = await show(capped, session)  # while the turn runs
        replies = [await a.deliver(session=session) for _ in range(3)]
    assert [r["in_reply_to"] for r in replies] == [[run], [b], [c]]
    assert items(capped, session)[oldest] == ("dropped", "cap:old", None)
    assert shown_drops(shown) == {oldest: ("dropped", "cap:old")}
    waiting = [q["msg_id"] for q in shown["queued"] if q["status"] in ("queued", "running")]
    assert waiting == [run, b, c]
    assert_run_once_in_order(capped, session, [run, b, c])


@asyncio_only
async def test_cap_drop_new_refuses_the_newcomer_but_never_an_interrupt(
    capped: DaemonProcess,
) -> None:
    sender = uniq("+")
    async with await adapter(capped) as a:
        setup = uniq("m")
        session = (await a.send_inbound(setup, "/queue followup drop:new", sender))["session"]
        await a.deliver(session=session, msg_id=setup)
        _, (run, b, c, refused) = await fill(a, sender, 3)
        await wait_item(capped, session, refused, ("dropped", "cap:new", None))
        # An interrupt is never refused: the oldest waiting message goes instead.
        urgent = uniq("m")
        await a.send_inbound(urgent, "urgent", sender, mode="interrupt")
        aborted = await a.deliver(session=session, status="aborted")
        final = await a.deliver(session=session, status="final")
        shown = await show(capped, session)
    assert aborted["in_reply_to"] == [run]
    assert final["in_reply_to"] == [run, c, urgent]
    assert shown_drops(shown) == {b: ("dropped", "cap:old"), refused: ("dropped", "cap:new")}
    assert_run_once_in_order(capped, session, [run, c, urgent])


@asyncio_only
async def test_cap_drop_summarize(capped: DaemonProcess) -> None:
    sender = uniq("+")
    async with await adapter(capped) as a:
        setup = uniq("m")
        session = (await a.send_inbound(setup, "/queue followup drop:summarize", sender))["session"]
        await a.deliver(session=session, msg_id=setup)
        _, (run, oldest, b, c) = await fill(a, sender, 3)
        replies = [await a.deliver(session=session) for _ in range(3)]
        shown = await show(capped, session)
    assert [r["in_reply_to"] for r in replies] == [[run], [b], [c]]
    assert shown_drops(shown) == {oldest: ("dropped", "cap:summarize")}
    # The dropped message is not an input of the next turn (it gets a note instead,
    # which the echo engine does not show; see test_summarize_note_reaches_the_engine).
    assert [t["inputs"] for t in shown["turns"]] == [[run], [b], [c]]
    assert_run_once_in_order(capped, session, [run, b, c])


NOTES_ENGINE = textwrap.dedent(
    """
    import json, sys, time
    turn = json.loads(sys.stdin.readline())
    text = "\\n".join([m["content"] for m in turn["inputs"]] + turn["notes"])
    sys.stdout.write(json.dumps({"type": "delta", "text": text}) + "\\n")
    sys.stdout.flush()
    if turn["inputs"][0]["content"] == "slow":
        time.sleep(1.0)  # long enough for the test to queue two more messages
    sys.stdout.write(json.dumps({"type": "final", "text": text}) + "\\n")
    sys.stdout.flush()
    """
)


@asyncio_only
async def test_summarize_note_reaches_the_engine(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    """With `drop = "summarize"` the next turn's request carries a note naming
    the dropped messages; a subprocess engine that echoes its notes shows it."""
    script = short_tmp / "notes_engine.py"
    script.write_text(NOTES_ENGINE)
    d = make_daemon(
        {
            "engine": {"kind": "subprocess", "command": [sys.executable, str(script)]},
            "queue": {"cap": 1, "drop": "summarize"},
        }
    )
    sender = uniq("+")
    run, dropped, kept = uniq("m"), uniq("m"), uniq("m")
    async with await adapter(d) as a:
        session = (await a.send_inbound(run, "slow", sender, mode="followup"))["session"]
        await a.turn_runs(session)
        await a.send_inbound(dropped, "the dropped one", sender, mode="followup")
        await a.send_inbound(kept, "kept", sender, mode="followup")
        first = await a.deliver(session=session)
        second = await a.deliver(session=session)
    assert first["in_reply_to"] == [run] and second["in_reply_to"] == [kept]
    assert items(d, session)[dropped] == ("dropped", "cap:summarize", None)
    note = second["text"].split("\n", 1)[1]
    assert "1 earlier message(s) were dropped" in note
    assert "the dropped one" in note  # the note names what was dropped
    assert_run_once_in_order(d, session, [run, kept])


# -- policy -----------------------------------------------------------------------


async def test_mode_refused_by_policy_is_invalid(shared: DaemonProcess) -> None:
    """Rule `strict` allows only `followup`: another mode is refused, not replaced."""
    sender = uniq("+")
    refused, allowed = uniq("m"), uniq("m")
    async with await adapter(shared, "strict") as a:
        with pytest.raises(BrokerError) as err:
            await a.send_inbound(refused, "x", sender, mode="interrupt")
        session = (await a.send_inbound(allowed, "y", sender, mode="followup"))["session"]
        await a.deliver(session=session)
    assert err.value.code == "invalid" and err.value.field == "queue_mode"
    assert "strict" in err.value.frame["message"]
    assert query(shared, "SELECT count(*) FROM inbound WHERE msg_id = ?", refused) == [(0,)]
    assert_run_once_in_order(shared, session, [allowed])


# -- the invariant under a mix ----------------------------------------------------


@asyncio_only
async def test_mixed_modes_never_reorder_or_run_twice(shared: DaemonProcess) -> None:
    """A burst of every mode, sent without waiting: whatever the interleaving,
    each message is in exactly one completed turn, in arrival order."""
    sender = uniq("+")
    modes = ["followup", "collect", "steer", "queue", "interrupt", "collect", "steer", "followup"]
    msgs = [uniq("m") for _ in modes]
    async with await adapter(shared) as a:
        session = (await a.send_inbound(msgs[0], LONG, sender, mode=modes[0]))["session"]
        await a.turn_runs(session)
        for n, (m, mode) in enumerate(zip(msgs[1:], modes[1:], strict=True), 1):
            await a.send_inbound(m, f"x{n}", sender, mode=mode)
            if n == 4:
                await a.turn_runs(session)  # let the interrupting batch start
        last = await a.deliver(session=session, msg_id=msgs[-1], status="final")

        async def all_done() -> bool:
            return all(s == "done" for s, _r, _t in items(shared, session).values())

        await wait_until(all_done, "every item done")
    assert last["in_reply_to"][-1] == msgs[-1]
    assert_run_once_in_order(shared, session, msgs)
    # Each reply answers exactly what its turn consumed.
    replies = [f for f in a.seen if f.get("type") == "deliver" and f["status"] == "final"]
    assert [r["in_reply_to"] for r in replies] == completed_inputs(shared, session)


# -- the same under a trio daemon -------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_interrupt_and_steer_under_a_trio_daemon(make_daemon: DaemonFactory) -> None:
    d = make_daemon(SLOW, backend="trio")
    async with anyio.create_task_group() as tg:
        tg.start_soon(interrupt_scenario, d)
        tg.start_soon(steer_scenario, d)
