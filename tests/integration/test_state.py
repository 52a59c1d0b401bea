"""The session-state record and memory across identities on the real daemon, under
asyncio and trio: `session.state` and `brokerctl state`, forks, `/new`, restarts,
recall over a merged person's sessions (and never another's), the bridge note."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.ctl import in_process_async
from tests.harness import DaemonProcess
from wire.client import BrokerClient, BrokerError

pytestmark = pytest.mark.anyio

# An engine that does what the message says, so each test can drive the record:
# "decide: X" (a decision event), "touch: P" (a file event), "fail-tool" (a tool
# the broker does not have: a failed call), "recall: Q" / "summary" (the recall
# tool; the reply is its answer), "show" (the reply lists the system messages of
# the context: the state record and any bridge note). Anything else: "ok".
ENGINE = textwrap.dedent("""
    import json, sys
    turn = json.loads(sys.stdin.readline())
    def say(obj): print(json.dumps(obj), flush=True)
    def tool(name, args):
        # tool call ids are unique in the ledger: one per turn here
        say({"type": "tool_call", "id": "c-" + turn["turn"], "name": name, "arguments": args})
        while True:
            line = json.loads(sys.stdin.readline())
            if line.get("type") == "tool_result":
                return line["content"]
    text = turn["inputs"][-1]["content"]
    reply = "ok"
    if text.startswith("decide: "):
        say({"type": "event", "event": "decision", "data": {"text": text[8:]}})
    elif text.startswith("touch: "):
        say({"type": "event", "event": "file", "data": {"path": text[7:], "op": "edit",
                                                         "content": "x"}})
    elif text == "fail-tool":
        tool("read_file", {"path": "secret.txt"})
    elif text.startswith("recall: "):
        reply = tool("conversation_recall", {"action": "search", "query": text[8:]})
    elif text == "summary":
        reply = tool("conversation_recall", {"action": "summary"})
    elif text == "show":
        system = [m["content"] for m in turn["history"] if m["role"] == "system"]
        reply = "\\n=====\\n".join(system) or "none"
    say({"type": "final", "text": reply, "model": "test-model",
         "usage": {"prompt_tokens": 10, "completion_tokens": 2}})
""")


@pytest.fixture
def state_daemon(make_daemon: DaemonFactory, anyio_backend: str, tmp_path: Path) -> DaemonProcess:
    program = tmp_path / "engine.py"
    program.write_text(ENGINE)
    return make_daemon(
        {"engine": {"kind": "subprocess", "command": [sys.executable, str(program)]}},
        backend=anyio_backend,
    )


class Person:
    """One sender on the sms channel; `say` returns the reply's text once delivered."""

    def __init__(self, d: DaemonProcess, sender: str) -> None:
        self.d, self.sender, self.n, self.session = d, sender, 0, ""

    async def say(self, text: str) -> str:
        self.n += 1
        msg_id = f"{self.sender}-{self.n}-{text[:10]}"
        async with await BrokerClient.connect(self.d.socket, role="adapter", channel="sms") as c:
            await c.send(
                {
                    "type": "inbound",
                    "req": msg_id,
                    "msg_id": msg_id,
                    "sender_id": self.sender,
                    "peer_kind": "dm",
                    "text": text,
                    "queue_mode": "followup",
                }
            )
            with anyio.fail_after(15):
                while True:  # replies not confirmed before a restart come again first
                    frame = await c.recv()
                    if frame["type"] == "deliver":
                        await c.send({"type": "delivered", "out_id": frame["out_id"]})
                        if msg_id in frame["in_reply_to"]:
                            break
        self.session = frame["session"]
        return str(frame["text"])


async def op(d: DaemonProcess, name: str, **args: Any) -> Any:
    async with await BrokerClient.connect(d.socket) as c:
        return await c.op(name, **args)


async def test_state_follows_the_thread_through_forks_new_threads_and_restarts(
    state_daemon: DaemonProcess,
) -> None:
    d = state_daemon
    ann = Person(d, "+1")
    await ann.say("decide: use JWT")
    await ann.say("decide: use pytest\nmore words")
    await ann.say("touch: src/auth.py")
    await ann.say("fail-tool")
    state = await op(d, "session.state", session=ann.session)
    assert state["focus"] == "fail-tool"
    assert [x["text"] for x in state["decisions"]] == ["use JWT", "use pytest"]
    assert [(f["path"], f["action"], f["turn"]) for f in state["files"]] == [
        ("src/auth.py", "edit", 3)
    ]
    [error] = state["errors"]
    assert error["text"].startswith("read_file failed: ") and error["turn"] == 4
    session = state["session"]
    assert (session["id"], session["model"], session["turns"]) == (ann.session, "test-model", 4)
    assert (session["tool_calls"], session["prompt_tokens"]) == (1, 40)

    shown = await ann.say("show")  # what the agent reads: the record of turn 4
    assert f"session: {ann.session}, model test-model, 4 turns" in shown
    assert "current focus: fail-tool" in shown and "- use pytest (turn 2)" in shown
    assert "- src/auth.py (edit, turn 3)" in shown

    turns = (await op(d, "session.show", session=ann.session))["turns"]
    fork = (await op(d, "session.fork", turn=turns[0]["id"], label="fork-at-1"))["label"]
    forked = await op(d, "session.state", session=fork)
    assert [x["text"] for x in forked["decisions"]] == ["use JWT"]  # not turn 2's
    assert forked["focus"] == "decide: use JWT" and forked["files"] == []
    assert forked["session"]["turns"] == 1

    await ann.say("/new")
    fresh = await op(d, "session.state", session=ann.session)
    assert (fresh["focus"], fresh["decisions"], fresh["files"], fresh["errors"]) == (
        None,
        [],
        [],
        [],
    )
    d.restart()
    after = await op(d, "session.state", session=ann.session)
    assert after["decisions"] == [] and after["session"]["turns"] == 0
    assert await ann.say("show") == "none"  # no old record comes back
    shown = await ann.say("show")
    assert "use JWT" not in shown and "current focus: show" in shown
    assert "1 turns" in shown


async def test_session_state_errors_and_brokerctl(
    state_daemon: DaemonProcess, anyio_backend: str
) -> None:
    d = state_daemon
    with pytest.raises(BrokerError) as missing:
        await op(d, "session.state", session="dm:nobody")
    assert (missing.value.code, missing.value.field) == ("not_found", "session")
    with pytest.raises(BrokerError) as bad:
        await op(d, "session.state")
    assert (bad.value.code, bad.value.field) == ("invalid", "session")
    if anyio_backend != "asyncio":
        return  # brokerctl is a client: once is enough
    bo = Person(d, "+9")
    await bo.say("decide: ship on friday")
    with anyio.fail_after(60):
        out = await in_process_async("--config", str(d.config_path), "state", bo.session)
        gone = await in_process_async("--config", str(d.config_path), "state", "dm:nobody")
    assert out.returncode == 0, out.stderr
    assert "ship on friday" in out.stdout
    assert "focus: decide: ship on friday" in out.stdout
    assert gone.returncode == 1 and "not_found" in gone.stderr


async def entity_of(d: DaemonProcess, sender: str) -> str:
    return str((await op(d, "contact.show", channel="sms", sender_id=sender))["entity"])


async def test_after_a_merge_recall_covers_both_histories_and_one_bridge_note(
    state_daemon: DaemonProcess,
) -> None:
    d = state_daemon
    mom_sms, mom_mail, stranger = Person(d, "+1"), Person(d, "+2"), Person(d, "+3")
    for _ in range(3):
        await mom_sms.say("hello there")  # the most turns: the primary
    await mom_mail.say("my cat is named Tom")
    await mom_mail.say("decide: adopt a dog")
    await stranger.say("the zebra plan is secret")
    assert "No messages" in await mom_sms.say("recall: Tom")  # not merged yet
    merged = await op(
        d, "entity.merge", **{"from": await entity_of(d, "+2"), "into": await entity_of(d, "+1")}
    )
    assert merged["primary"] == mom_sms.session

    first = await mom_sms.say("show")  # the live actor was handed the note
    assert f"in session {mom_mail.session}, which is now merged" in first
    assert "- adopt a dog (turn 2)" in first
    assert "merged into" not in await mom_sms.say("show")  # exactly once

    found = await mom_sms.say("recall: Tom")
    assert "cat is named **Tom**" in found and mom_mail.session in found
    assert "No messages" in await mom_sms.say("recall: zebra")  # another person's
    assert "No messages" in await stranger.say("recall: Tom")
    summary = await mom_sms.say("summary")
    assert f"This person's other sessions, also searched: {mom_mail.session}" in summary
    assert "State record of the current thread:" in summary

    # A second merge, then a restart before the primary's next turn: the note waits
    # in the ledger and still shows exactly once.
    mom_work = Person(d, "+4")
    await mom_work.say("decide: quarterly report first")
    await op(
        d, "entity.merge", **{"from": await entity_of(d, "+4"), "into": await entity_of(d, "+1")}
    )
    d.restart()
    shown = await mom_sms.say("show")
    assert f"in session {mom_work.session}" in shown and "quarterly report first" in shown
    assert mom_mail.session not in shown  # consumed before the restart
    assert "merged into" not in await mom_sms.say("show")
