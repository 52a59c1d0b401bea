"""State that a real model fills (issue 44, point 3), on the real daemon with the
`openai` engine against a fake model server: the model calls `remember` once, and
200 turns and several compactions later the decision is still in the session-state
record of the prompt the model gets, while the turn that said it is long gone from
the verbatim history. Every turn's system prompt says the archive exists and that
`conversation_recall` reads it (Layer C)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from broker.engines.fake_openai import FakeOpenAI, text_reply, tool_call_reply
from broker.mailbox.turn_parts import ARCHIVE_LINES
from core.compaction import SUMMARY_SYSTEM_PROMPT
from tests.conftest import DaemonFactory
from tests.integration.wire import Adapter, uniq

pytestmark = pytest.mark.anyio
DECISION = "Never use an ORM: plain SQL only"
TURNS = 200


@pytest.fixture
def api() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(echo=True) as fake:  # unscripted requests say the message back
        yield fake


def turn_requests(api: FakeOpenAI) -> list[dict[str, Any]]:
    """The requests of turns (not of summaries), in order."""
    return [r for r in api.requests if r["messages"][0]["content"] != SUMMARY_SYSTEM_PROMPT]


async def test_a_remembered_decision_outlives_its_turn_by_200_turns_and_compactions(
    make_daemon: DaemonFactory, api: FakeOpenAI, anyio_backend: str
) -> None:
    engine = {
        "kind": "openai",
        "base_url": api.base_url,
        "api_key": "sk-fake",
        "context_window": 1024,  # a small budget: a compaction every few dozen turns
        "reserve_reply_tokens": 128,
    }
    d = make_daemon({"engine": engine, "queue": {"debounce_ms": 0}}, backend=anyio_backend)
    arguments = json.dumps({"kind": "decision", "text": DECISION})
    api.script(tool_call_reply([("call_1", "remember", arguments)]), text_reply(["Noted."]))
    async with await Adapter.connect(d, "sms") as a:
        for n in range(TURNS + 1):
            text = "We decided: never an ORM." if n == 0 else f"message number {n}"
            msg_id = uniq("m")
            await a.send_inbound(msg_id, text, "+1")
            reply = await a.deliver(msg_id=msg_id, status="final")
            await a.confirm(reply["out_id"])
            if n == 0:
                assert reply["text"] == "Noted."
    with d.db() as db:
        session = reply["session"]
        compactions = db.execute(
            "SELECT count(*) FROM compactions WHERE session_label = ?", (session,)
        ).fetchone()[0]
        calls = db.execute("SELECT name, status FROM tool_calls").fetchall()
    assert compactions >= 2
    assert calls == [("remember", "ok")]
    first, last = turn_requests(api)[0], turn_requests(api)[-1]
    assert [t["function"]["name"] for t in first["tools"]].count("remember") == 1
    for request in (first, last):
        assert request["messages"][0]["role"] == "system"
        assert request["messages"][0]["content"].endswith(ARCHIVE_LINES)
    said = [m["content"] for m in last["messages"] if m["role"] == "user"]
    assert f"message number {TURNS}" in said[-1]
    assert not any("We decided" in text for text in said)  # compacted away long ago
    state = [
        m["content"]
        for m in last["messages"]
        if m["role"] == "system" and m["content"].startswith("Session state")
    ]
    assert len(state) == 1 and f"- {DECISION} (turn 1)" in state[0], last["messages"]
