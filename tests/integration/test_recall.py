"""Recall over the verbatim archive: the conversation_recall tool and the recall.search op."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import DaemonFactory
from tests.integration.test_events import chat
from wire.client import BrokerClient

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

ENGINE = textwrap.dedent("""
    import json, sys
    turn = json.loads(sys.stdin.readline())
    text = "\\n".join(m["content"] for m in turn["inputs"])
    if text.startswith("recall "):
        print(json.dumps({"type": "tool_call", "id": "c1", "name": "conversation_recall",
                          "arguments": {"action": "search", "query": text[7:]}}), flush=True)
        text = json.loads(sys.stdin.readline())["content"]
    print(json.dumps({"type": "final", "text": text}), flush=True)
""")


async def test_agent_and_operator_recall(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    program = tmp_path / "engine.py"
    program.write_text(ENGINE)
    d = make_daemon({"engine": {"kind": "subprocess", "command": [sys.executable, str(program)]}})
    replies = await chat(
        d.socket, ["the launch code is zebra-42", "unrelated chatter", "recall zebra"]
    )
    assert "zebra" in replies[2]["text"] and "launch code" in replies[2]["text"]
    async with await BrokerClient.connect(d.socket) as op:
        hits = await op.op("recall.search", query="zebra", session=replies[0]["session"])
        everywhere = await op.op("recall.search", query="chatter")
    assert hits and all("zebra" in h["snippet"].lower() for h in hits)
    assert {h["session"] for h in hits} == {replies[0]["session"]}
    assert everywhere and "chatter" in everywhere[0]["snippet"]
