"""Typed turn events, running totals, the injected state record, the scratchpad."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import DaemonFactory
from wire.client import BrokerClient, BrokerError

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

ENGINE = textwrap.dedent("""
    import json, sys
    turn = json.loads(sys.stdin.readline())
    def say(obj): print(json.dumps(obj), flush=True)
    text = "\\n".join(m["content"] for m in turn["inputs"])
    if text == "work":
        say({"type": "event", "event": "intent", "data": {"text": "fix the login bug"}})
        say({"type": "event", "event": "file", "data": {"path": "login.py", "op": "edit"}})
        say({"type": "event", "event": "error", "data": {"text": "tests fail"}})
        say({"type": "event", "event": "decision",
             "data": {"text": "use argon2", "resolves": "tests fail"}})
        say({"type": "final", "text": "done"})
    else:  # show what the broker put at the top of the context
        system = [m["content"] for m in turn["history"] if m["role"] == "system"]
        say({"type": "final", "text": " | ".join(system) or "none"})
""")


async def chat(
    socket: Path, texts: list[str], prefix: str = "m", sender: str = "+1"
) -> list[dict[str, Any]]:
    out = []
    async with await BrokerClient.connect(socket, role="adapter", channel="sms") as c:
        for n, text in enumerate(texts):
            await c.send(
                {
                    "type": "inbound",
                    "req": str(n),
                    "msg_id": f"{prefix}{n}",
                    "sender_id": sender,
                    "peer_kind": "dm",
                    "text": text,
                    "queue_mode": "followup",
                }
            )
            with anyio.fail_after(15):
                while (frame := await c.recv())["type"] != "deliver":
                    pass
            await c.send({"type": "delivered", "out_id": frame["out_id"]})
            out.append(frame)
    return out


async def test_events_totals_state_and_scratchpad(
    make_daemon: DaemonFactory, tmp_path: Path
) -> None:
    program = tmp_path / "engine.py"
    program.write_text(ENGINE)
    d = make_daemon({"engine": {"kind": "subprocess", "command": [sys.executable, str(program)]}})
    first, second = await chat(d.socket, ["work", "what now?"])
    session = first["session"]
    assert "current focus: fix the login bug" in second["text"]
    assert "- login.py (edit, turn 1)" in second["text"]
    assert "- tests fail (turn 1, resolved)" in second["text"]
    async with await BrokerClient.connect(d.socket) as op:
        everything = await op.op("events.query", session=session)
        decisions = await op.op("events.query", type="decision")
        by_text = await op.op("events.query", text="ARGON2")
        shown = await op.op("session.show", session=session)
        with pytest.raises(BrokerError) as bad:
            await op.op("events.query", type="gossip")
        assert await op.op("scratchpad.get", session=session) == {}
        await op.op("scratchpad.merge", session=session, patch={"plan": {"step": 1}, "x": 1})
        merged = await op.op(
            "scratchpad.merge", session=session, patch={"plan": {"done": True}, "x": None}
        )
        assert merged == {"plan": {"step": 1, "done": True}}
        assert await op.op("scratchpad.get", session=session) == merged
    first_turn = [e for e in everything if e["turn"] == everything[-1]["turn"]]
    # The broker's intent (the inputs), the engine's events as they came, the broker's
    # record of the model call, and the snapshot of the files the turn left.
    assert [e["type"] for e in reversed(first_turn)] == [
        "intent",
        "intent",
        "file",
        "error",
        "decision",
        "llm",
        "snapshot",
    ]
    assert [e["seq"] for e in reversed(first_turn)] == [0, 1, 2, 3, 4, 5, 6]
    assert [e["payload"]["text"] for e in decisions] == ["use argon2"]
    assert [e["type"] for e in by_text] == ["decision"]
    assert bad.value.code == "invalid" and bad.value.field == "type"
    totals = shown["totals"]
    # The second turn starts with a snapshot of the file the first one left.
    assert totals["events"] == 10 and totals["files_modified"] == 1
    assert totals["errors"] == 1 and totals["errors_resolved"] == 1
    assert totals["model_calls"] == 2
    d.restart()  # the state record is read from the ledger by a fresh actor
    again = await chat(d.socket, ["and now?"], prefix="after-restart-")
    assert "current focus: what now?" in again[0]["text"]  # the person's latest message
    assert "- use argon2 (turn 1)" in again[0]["text"]
