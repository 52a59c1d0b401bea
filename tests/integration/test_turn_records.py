"""Turn records on the real daemon (issue 21): titles and outcomes in `session.show`,
the running turn listed last with its partial output, the broker's own events of each
turn with their fields, and reactions to replies as `feedback` events."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.ctl import in_process
from tests.harness import DaemonProcess
from tests.integration.wire import Adapter, operator
from wire.client import BrokerError

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]
BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])

# One program, what it does chosen by the message's first word.
ENGINE = textwrap.dedent("""
    import json, sys, time
    turn = json.loads(sys.stdin.readline())
    def say(obj): print(json.dumps(obj), flush=True)
    text = "\\n".join(m["content"] for m in turn["inputs"])
    word = text.split()[0] if text.split() else ""
    if word == "titled":
        say({"type": "event", "event": "intent", "data": {"title": "Rename the module"}})
        say({"type": "final", "text": "renamed"})
    elif word == "fail":
        say({"type": "error", "message": "the model is down"})
    elif word == "tools":
        for n, name in enumerate(["conversation_recall", "no_such_tool"]):
            say({"type": "tool_call", "id": f"c{n}", "name": name,
                 "arguments": {"action": "summary"}})
            while json.loads(sys.stdin.readline()).get("type") != "tool_result":
                pass
        say({"type": "final", "text": "used tools", "model": "m-1",
             "usage": {"prompt_tokens": 11, "completion_tokens": 3}})
    elif word == "slow":  # speaks for a while: the operator watches it move
        for n in range(40):
            say({"type": "delta", "text": f"part{n} "})
            time.sleep(0.05)
        say({"type": "final"})
    else:
        say({"type": "final", "text": "ok: " + text})
""")


def engine_config(tmp_path: Path) -> dict[str, Any]:
    program = tmp_path / "engine.py"
    program.write_text(ENGINE)
    return {
        "engine": {
            "kind": "subprocess",
            "command": [sys.executable, str(program)],
            "progress_save_s": 0.1,
        }
    }


def brokerctl(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return in_process(
        "--config", str(d.config_path), *args, env={"COLUMNS": "250"}
    )  # room for the table's columns


async def turn_of(a: Adapter, msg_id: str, text: str) -> dict[str, Any]:
    """Send a message and wait for its reply, confirmed."""
    await a.send_inbound(msg_id, text, "+1", mode="followup")
    frame = await a.deliver(msg_id=msg_id)
    await a.confirm(frame["out_id"])
    return frame


async def show(d: DaemonProcess, session: str) -> dict[str, Any]:
    async with await operator(d) as op:
        shown: dict[str, Any] = await op.op("session.show", session=session)
    return shown


@BACKENDS
async def test_every_turn_has_a_title_and_an_outcome(
    make_daemon: DaemonFactory, tmp_path: Path, backend: str
) -> None:
    d = make_daemon(engine_config(tmp_path), backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        first = await turn_of(a, "m1", "Fix the login bug\nit fails on Safari")
        await turn_of(a, "m2", "titled please")
        failed = await turn_of(a, "m3", "fail now")
    assert failed["status"] == "failed"
    turns = (await show(d, first["session"]))["turns"]
    assert [(t["title"], t["outcome"]) for t in turns] == [
        ("Fix the login bug", "completed"),
        ("Rename the module", "completed"),
        ("fail now", "failed (engine): the model is down"),
    ]
    assert [t["title_source"] for t in turns] == ["mechanical", "engine", "mechanical"]
    shown = brokerctl(d, "show", first["session"])
    assert shown.returncode == 0, shown.stderr
    for title, outcome in [("Fix the login bug", "completed"), ("Rename the module", "completed")]:
        assert any(title in line and outcome in line for line in shown.stdout.splitlines()), (
            shown.stdout
        )
    assert "failed (engine)" in shown.stdout


@BACKENDS
async def test_a_running_turn_is_listed_last_and_its_output_grows(
    make_daemon: DaemonFactory, tmp_path: Path, backend: str
) -> None:
    d = make_daemon(engine_config(tmp_path), backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        first = await turn_of(a, "m1", "hello")
        session = first["session"]
        await a.send_inbound("m2", "slow story", "+1", mode="followup")
        seen: list[str] = []
        with anyio.fail_after(10):
            while len(set(seen)) < 2:  # two different partial outputs: it moved
                last = (await show(d, session))["turns"][-1]
                if last["status"] == "running" and last["output"]:
                    seen.append(last["output"])
                await anyio.sleep(0.05)
        assert last["id"] != first["turn"] and last["inputs"] == ["m2"]
        assert last["title"] == "slow story" and last["outcome"] is None
        assert last["parent"] == first["turn"] and last["started_at"] > 0
        assert seen[-1].startswith("part0 part1") and len(seen[-1]) > len(seen[0])
        done = await a.deliver(msg_id="m2")
    turns = (await show(d, session))["turns"]
    assert [t["status"] for t in turns] == ["completed", "completed"]
    assert turns[-1]["id"] == done["turn"] and turns[-1]["output"].startswith(seen[-1])


@BACKENDS
async def test_the_broker_records_intent_llm_and_action_events(
    make_daemon: DaemonFactory, tmp_path: Path, backend: str
) -> None:
    d = make_daemon(engine_config(tmp_path), backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        frame = await turn_of(a, "m1", "tools please")
    async with await operator(d) as op:
        events = await op.op("events.query", turn=frame["turn"])
        shown = await op.op("session.show", session=frame["session"])
    events.reverse()  # oldest first
    assert [e["type"] for e in events] == ["intent", "action", "action", "llm"]
    assert [e["seq"] for e in events] == [0, 1, 2, 3]
    intent, ok, refused, llm = (e["payload"] for e in events)
    assert intent["inputs"] == [{"msg_id": "m1", "sender": "+1", "text": "tools please"}]
    assert (ok["tool"], ok["status"]) == ("conversation_recall", "ok")
    assert (refused["tool"], refused["status"]) == ("no_such_tool", "error")
    assert "no_such_tool" in refused["error"]
    assert all(isinstance(e["duration_ms"], int) and e["duration_ms"] >= 0 for e in (ok, refused))
    assert (llm["model"], llm["prompt_tokens"], llm["completion_tokens"]) == ("m-1", 11, 3)
    assert llm["stop_reason"] == "end_turn" and llm["duration_ms"] >= 0
    assert shown["totals"]["model_calls"] == 1 and shown["totals"]["tool_calls"] == 2


@BACKENDS
async def test_a_reaction_is_feedback_on_the_turn_that_made_the_reply(
    make_daemon: DaemonFactory, tmp_path: Path, backend: str
) -> None:
    d = make_daemon(engine_config(tmp_path), backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        frame = await turn_of(a, "m1", "hello")
        ack = await a.send_inbound("r1", "", "+1", reaction="👍", reply_to=frame["out_id"])
        again = await a.send_inbound("r1", "", "+1", reaction="👍", reply_to=frame["out_id"])
        with pytest.raises(BrokerError) as unknown:
            await a.send_inbound("r2", "nice", "+1", reaction="👍", reply_to="no-such-out-id")
        with pytest.raises(BrokerError) as bare:
            await a.send_inbound("r3", "nice", "+1", reaction="👍")
        # The connection still serves, and no turn ran for the reactions.
        await turn_of(a, "m2", "still here")
        assert not [f for f in a.kept() if f.get("type") == "deliver"]
    assert (ack["turn"], ack["feedback"], ack["item"], ack["duplicate"]) == (
        frame["turn"],
        True,
        None,
        False,
    )
    assert again["duplicate"] is True and again["turn"] == frame["turn"]
    assert (unknown.value.code, unknown.value.field) == ("not_found", "reply_to")
    assert (bare.value.code, bare.value.field) == ("invalid", "reply_to")
    async with await operator(d) as op:
        feedback = await op.op("events.query", type="feedback")
        turns = (await op.op("session.show", session=frame["session"]))["turns"]
    assert len(feedback) == 1 and feedback[0]["turn"] == frame["turn"]
    payload = feedback[0]["payload"]
    assert (payload["reaction"], payload["out_id"], payload["msg_id"]) == (
        "👍",
        frame["out_id"],
        "r1",
    )
    assert [t["inputs"] for t in turns] == [["m1"], ["m2"]]
