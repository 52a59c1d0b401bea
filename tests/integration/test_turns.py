"""Turns against the real daemon: how each is committed, a failing engine, crash
recovery, the session state operators see, and sessions that go quiet.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from core.session_state import loads, render
from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess, write_config
from tests.integration.wire import (
    SLOW,
    Adapter,
    assert_run_once_in_order,
    items,
    op,
    query,
    running_daemon,
    show,
    turns,
    uniq,
    wait_until,
)

pytestmark = pytest.mark.anyio
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

# Engine: 10 deltas 150 ms apart, stopped after 0.6 s. A reply of 10 characters
# or more times out; a 1-character reply takes one delta (150 ms) and completes.
# Actors retire after 0.3 s without work.
IMPATIENT: dict[str, Any] = {
    "engine": {"chunks": 10, "delay_ms": 150, "timeout_s": 0.6},
    "queue": {"idle_stop_s": 0.3},
}


@pytest.fixture(scope="module")
def shared() -> Iterator[DaemonProcess]:
    with running_daemon(SLOW) as d:
        yield d


@pytest.fixture(scope="module")
def impatient() -> Iterator[DaemonProcess]:
    with running_daemon(IMPATIENT) as d:
        yield d


def state_words(d: DaemonProcess, session: str, turn_id: str | None) -> int:
    """Words of the state record the echo engine counted in a turn after `turn_id`: the
    record after that turn, in the context as a system message (ledger/state_records.py)."""
    if turn_id is None:
        return 0
    [(raw,)] = query(d, "SELECT state FROM turn_state WHERE turn_id = ?", turn_id)
    text = render(loads(raw), session)
    return len(text.split()) if text else 0


# -- committing -------------------------------------------------------------------


@asyncio_only
async def test_each_turn_commits_on_the_previous_head(any_backend_daemon: DaemonProcess) -> None:
    d = any_backend_daemon
    sender = uniq("+")
    texts = ["one two", "three", "four five six"]
    msgs = [uniq("m") for _ in texts]
    replies = []
    async with await Adapter.connect(d, uniq("t")) as a:
        for m, text in zip(msgs, texts, strict=True):
            session = (await a.send_inbound(m, text, sender, mode="followup"))["session"]
            replies.append(await a.deliver(session=session))

    rows = turns(d, session)
    ids = [t["id"] for t in rows]
    assert ids == [r["turn"] for r in replies]
    assert [t["parent_id"] for t in rows] == [None, *ids[:-1]]
    assert {(t["type"], t["status"], t["engine"], t["model"]) for t in rows} == {
        ("turn", "completed", "echo", "echo")
    }
    # Tokens as the echo engine counts them: words of the reply; words of the
    # history (the state record, earlier inputs and replies) plus this turn's inputs.
    state = [state_words(d, session, t["parent_id"]) for t in rows]
    assert [
        (t["prompt_tokens"] - w, t["completion_tokens"]) for t, w in zip(rows, state, strict=True)
    ] == [
        (2, 2),
        (2 + 2 + 1, 1),
        (2 + 2 + 1 + 1 + 3, 3),
    ]
    # Each turn's messages: its input, then the reply.
    for t, m, text in zip(rows, msgs, texts, strict=True):
        got = query(
            d, "SELECT role, msg_id, content FROM messages WHERE turn_id = ? ORDER BY seq", t["id"]
        )
        assert got == [("user", m, text), ("assistant", None, text)]

    shown = await show(d, session)
    assert shown["head"] == ids[-1] and shown["state"] == "idle"
    assert [t["id"] for t in shown["turns"]] == ids  # root to head
    assert [t["parent"] for t in shown["turns"]] == [None, *ids[:-1]]
    assert [t["inputs"] for t in shown["turns"]] == [[m] for m in msgs]
    assert [t["output"] for t in shown["turns"]] == texts
    assert [t["prompt_tokens"] for t in shown["turns"]] == [t["prompt_tokens"] for t in rows]
    listed = {s["label"]: s for s in await op(d, "sessions.list")}
    assert listed[session]["turns"] == 3 and listed[session]["queued"] == 0

    history = query(
        d,
        "SELECT turn_id, prev_turn_id, reason FROM session_history"
        " WHERE session_label = ? ORDER BY id",
        session,
    )
    assert history == [(t, p, "turn") for t, p in zip(ids, [None, *ids[:-1]], strict=True)]
    done = items(d, session)
    assert [done[m] for m in msgs] == [("done", None, t) for t in ids]
    outbox = query(
        d, "SELECT turn_id, channel FROM outbox WHERE session_label = ? ORDER BY out_id", session
    )
    assert outbox == [(t, a.channel) for t in ids]


# -- a failing engine -------------------------------------------------------------


@asyncio_only
async def test_engine_timeout_fails_the_turn_and_the_session_goes_on(
    impatient: DaemonProcess,
) -> None:
    sender = uniq("+")
    slow, after = uniq("m"), uniq("m")
    async with await Adapter.connect(impatient, uniq("t")) as a:
        session = (await a.send_inbound(slow, "abcdefghijklmnopqrst", sender))["session"]
        failed = await a.deliver(session=session)
        await a.send_inbound(after, "x", sender)
        ok = await a.deliver(session=session)
    assert failed["status"] == "failed" and failed["in_reply_to"] == [slow]
    assert failed["text"] == "the agent took too long to answer and was stopped"
    assert ok["status"] == "final" and ok["text"] == "x" and ok["in_reply_to"] == [after]

    bad, good = turns(impatient, session)
    assert (bad["status"], bad["reason"]) == ("failed", "timeout")
    assert bad["error"] == failed["text"]
    assert bad["id"] == failed["turn"] and bad["inputs"] == [slow]
    assert "abcdefghijklmnopqrst".startswith(bad["output"])  # what streamed before the timeout
    assert (good["status"], good["parent_id"]) == ("completed", bad["id"])
    done = items(impatient, session)
    assert done[slow] == ("done", None, bad["id"])  # failed: done, not run again
    assert done[after] == ("done", None, good["id"])
    shown = await show(impatient, session)
    assert [(t["status"], t["reason"]) for t in shown["turns"]] == [
        ("failed", "timeout"),
        ("completed", None),
    ]


# -- crash recovery ---------------------------------------------------------------


def logs_of(d: DaemonProcess) -> str:
    """The daemon's log, and its peer's under TEST_CLUSTER=2: a recovery may run on either."""
    return "".join(node.log() for node in (d, *d.peers))


def restart_with_a_quick_engine(d: DaemonProcess, chunks: int) -> None:
    """Start the killed daemon again, its engine answering at once, so it recovers quickly."""
    for node in (d, *d.peers):  # a pair of nodes under TEST_CLUSTER=2: both
        node.config["engine"] = {"chunks": chunks, "delay_ms": 0}
        write_config(node.config_path, node.config)
    d.start()


@asyncio_only
async def test_crash_mid_turn_reruns_it_once_after_restart(make_daemon: DaemonFactory) -> None:
    d = make_daemon({"engine": {"chunks": 4, "delay_ms": 1000}})
    sender, channel = uniq("+"), uniq("t")
    cut, b, c = uniq("m"), uniq("m"), uniq("m")
    async with await Adapter.connect(d, channel) as a:
        session = (await a.send_inbound(cut, "abcd", sender, mode="followup"))["session"]
        await a.turn_runs(session)
        await a.send_inbound(b, "b", sender, mode="followup")
        await a.send_inbound(c, "c", sender, mode="followup")

        async def running() -> bool:
            return items(d, session)[cut][0] == "running"

        await wait_until(running, "the first turn's item marked running")
        d.kill()  # SIGKILL in the middle of the turn
    assert [t["id"] for t in turns(d, session)] == []

    restart_with_a_quick_engine(d, chunks=2)
    async with await Adapter.connect(d, channel) as a:
        replies = [await a.deliver(session=session) for _ in range(3)]  # waited in the outbox
    assert [r["in_reply_to"] for r in replies] == [[cut], [b], [c]]
    assert [r["status"] for r in replies] == ["final"] * 3

    crashed, *rest = turns(d, session)
    assert (crashed["status"], crashed["reason"], crashed["inputs"]) == ("aborted", "crash", [cut])
    assert [t["status"] for t in rest] == ["completed"] * 3
    assert [t["parent_id"] for t in rest] == [crashed["id"], rest[0]["id"], rest[1]["id"]]
    assert_run_once_in_order(d, session, [cut, b, c])
    assert "turns cut off by a crash recorded as aborted" in logs_of(d)


@asyncio_only
async def test_a_turn_cut_off_by_a_crash_keeps_the_output_it_had_saved(
    make_daemon: DaemonFactory,
) -> None:
    """A turn that streams for longer than engine.progress_save_s saves its output so
    far; a SIGKILL then leaves the crashed turn that output, and its inputs run again."""
    d = make_daemon({"engine": {"chunks": 8, "delay_ms": 400, "progress_save_s": 0.1}})
    sender, channel, cut = uniq("+"), uniq("t"), uniq("m")
    async with await Adapter.connect(d, channel) as a:
        session = (await a.send_inbound(cut, "abcdefgh", sender, mode="followup"))["session"]

        async def saved() -> bool:
            return bool(query(d, "SELECT 1 FROM turn_progress WHERE session_label = ?", session))

        await wait_until(saved, "the turn's partial output saved")
        d.kill()
    [(kept,)] = query(d, "SELECT output FROM turn_progress WHERE session_label = ?", session)
    assert kept and "abcdefgh".startswith(kept) and kept != "abcdefgh"

    restart_with_a_quick_engine(d, chunks=1)
    async with await Adapter.connect(d, channel) as a:
        reply = await a.deliver(session=session)
    assert (reply["in_reply_to"], reply["text"], reply["status"]) == ([cut], "abcdefgh", "final")
    crashed, rerun = turns(d, session)
    assert (crashed["status"], crashed["reason"], crashed["output"]) == ("aborted", "crash", kept)
    assert crashed["started_at"] < crashed["completed_at"]  # its real start, not the restart
    assert (rerun["status"], rerun["output"]) == ("completed", "abcdefgh")
    assert query(d, "SELECT count(*) FROM turn_progress") == [(0,)]
    assert_run_once_in_order(d, session, [cut])


@asyncio_only
async def test_crash_during_an_interrupt_batch_reruns_the_batch_as_one_turn(
    make_daemon: DaemonFactory,
) -> None:
    """An interrupt joins the aborted turn's inputs into its own turn; a crash during
    that turn does not split them into a turn each after the restart."""
    d = make_daemon({"engine": {"chunks": 4, "delay_ms": 1000}})
    sender, channel = uniq("+"), uniq("t")
    first, urgent, later = uniq("m"), uniq("m"), uniq("m")
    async with await Adapter.connect(d, channel) as a:
        session = (await a.send_inbound(first, "abcd", sender, mode="followup"))["session"]
        await a.turn_runs(session)
        await a.send_inbound(urgent, "efgh", sender, mode="interrupt")

        async def batch_running() -> bool:
            now = items(d, session)
            return now[first][0] == now[urgent][0] == "running" and now[first][2] == now[urgent][2]

        await wait_until(batch_running, "the interrupt's batch marked running")
        await a.send_inbound(later, "z", sender, mode="followup")
        d.kill()

    restart_with_a_quick_engine(d, chunks=1)
    async with await Adapter.connect(d, channel) as a:
        replies = [await a.deliver(session=session, status="final") for _ in range(2)]
    assert [r["in_reply_to"] for r in replies] == [[first, urgent], [later]]
    assert [(t["status"], t["reason"], t["inputs"]) for t in turns(d, session)] == [
        ("aborted", "interrupt", [first]),
        ("aborted", "crash", [first, urgent]),
        ("completed", None, [first, urgent]),
        ("completed", None, [later]),
    ]
    assert_run_once_in_order(d, session, [first, urgent, later])


# -- state ------------------------------------------------------------------------


@asyncio_only
async def test_state_is_streaming_during_a_turn_and_idle_after(shared: DaemonProcess) -> None:
    if shared.peers:
        pytest.skip(
            "TEST_CLUSTER=2: a session's state is the view of the node asked, and the"
            " turn may stream on the other node (docs/cluster.md, Limits)"
        )
    sender = uniq("+")
    async with await Adapter.connect(shared, uniq("t")) as a:
        session = (await a.send_inbound(uniq("m"), "abcdefgh", sender))["session"]
        await a.turn_runs(session)
        states: set[str] = set()

        async def both_states() -> tuple[str, str]:
            shown = str((await show(shared, session))["state"])
            listed = {s["label"]: str(s["state"]) for s in await op(shared, "sessions.list")}
            return shown, listed[session]

        async def streaming() -> bool:
            now = await both_states()
            states.update(now)
            return now == ("streaming", "streaming")

        await wait_until(streaming, "state streaming")
        await a.deliver(session=session)

        async def idle() -> bool:
            return await both_states() == ("idle", "idle")

        await wait_until(idle, "state idle")
    assert "streaming" in states


# -- quiet sessions ---------------------------------------------------------------


async def all_actors_retired(d: DaemonProcess) -> None:
    async def none_live() -> bool:
        health: dict[str, Any] = await op(d, "health")
        return bool(health["actors"] == 0)

    await wait_until(none_live, "every actor retired")


@asyncio_only
async def test_a_session_goes_on_after_its_actor_retires(impatient: DaemonProcess) -> None:
    """Actors retire after `queue.idle_stop_s` (0.3 s here; its timing is
    tests/unit/test_actor.py's): the next actor continues the thread and sees the
    history."""
    sender = uniq("+")
    first, later = uniq("m"), uniq("m")
    async with await Adapter.connect(impatient, uniq("t")) as a:
        session = (await a.send_inbound(first, "x", sender))["session"]
        await a.deliver(session=session)
        await all_actors_retired(impatient)
        await a.send_inbound(later, "y", sender)
        await a.deliver(session=session)
    one, two = turns(impatient, session)
    assert two["parent_id"] == one["id"]
    # "x", "x", then "y", and the state record after the first turn
    assert two["prompt_tokens"] == 1 + 1 + 1 + state_words(impatient, session, one["id"])
    assert_run_once_in_order(impatient, session, [first, later])


@asyncio_only
async def test_history_is_the_same_before_and_after_the_actor_retires(
    impatient: DaemonProcess,
) -> None:
    sender = uniq("+")
    async with await Adapter.connect(impatient, uniq("t")) as a:
        session = (await a.send_inbound(uniq("m"), "abcdefghijklmnopqrst", sender))["session"]
        assert (await a.deliver(session=session))["status"] == "failed"
        for _ in range(2):  # the same actor
            await a.send_inbound(uniq("m"), "x", sender)
            await a.deliver(session=session)
        await all_actors_retired(impatient)  # the next actor loads the history
        await a.send_inbound(uniq("m"), "x", sender)
        await a.deliver(session=session)
    prompts = [
        t["prompt_tokens"] - state_words(impatient, session, t["parent_id"])
        for t in turns(impatient, session)[1:]
    ]
    # Each turn adds its input and its reply ("x", "x") to the history.
    assert prompts[1] - prompts[0] == 2
    assert prompts[2] - prompts[1] == 2, prompts
