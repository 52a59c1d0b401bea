"""The engine's own closing summary (broker/mailbox/closing.py) on the real daemon:
`session.close` without a summary asks the session's `openai` engine (a fake model
server here) for one, and takes the mechanical summary of the thread's titles when
the engine fails."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from broker.engines.fake_openai import FakeOpenAI, error_reply, text_reply
from core.compaction import SUMMARY_SYSTEM_PROMPT
from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from tests.integration.wire import Adapter, op, uniq

pytestmark = pytest.mark.anyio


@pytest.fixture
def api() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(echo=True) as fake:  # unscripted requests say the message back
        yield fake


async def say(d: DaemonProcess, text: str, sender: str = "+1") -> dict[str, Any]:
    """A DM and its final reply, confirmed."""
    async with await Adapter.connect(d, "sms") as a:
        msg_id = uniq("m")
        await a.send_inbound(msg_id, text, sender)
        reply = await a.deliver(msg_id=msg_id, status="final")
        await a.confirm(reply["out_id"])
        return reply


def openai_config(api: FakeOpenAI) -> dict[str, Any]:
    return {
        "engine": {"kind": "openai", "base_url": api.base_url, "api_key": "sk-fake"},
        "queue": {"debounce_ms": 0},
    }


async def test_the_engine_writes_the_closing_summary(
    make_daemon: DaemonFactory, api: FakeOpenAI, anyio_backend: str
) -> None:
    d = make_daemon(openai_config(api), backend=anyio_backend)
    reply = await say(d, "Plan the trip to Lisbon")
    assert reply["text"] == "You said: Plan the trip to Lisbon"
    written = "We planned a trip to Lisbon; the hotel is left to book."
    api.script(text_reply([written]))
    closed = await op(d, "session.close", session=reply["session"])
    assert (closed["source"], closed["closing_summary"]) == ("engine", written)
    asked = api.requests[-1]
    assert asked["messages"][0] == {"role": "system", "content": SUMMARY_SYSTEM_PROMPT}
    prompt = asked["messages"][-1]["content"]
    assert "Plan the trip to Lisbon" in prompt and "This conversation is ending" in prompt
    assert "tools" not in asked  # the summarizer calls no tools
    shown = await op(d, "session.show", session=reply["session"])
    assert shown["closing_summary"] == written


async def test_an_engine_that_fails_leaves_the_mechanical_summary(
    make_daemon: DaemonFactory, api: FakeOpenAI, anyio_backend: str
) -> None:
    d = make_daemon(openai_config(api), backend=anyio_backend)
    reply = await say(d, "Book the hotel")
    api.script(error_reply(400, "the model is gone"))
    closed = await op(d, "session.close", session=reply["session"])
    assert closed["source"] == "mechanical"
    assert closed["closing_summary"] == "Closed after 1 turn(s): Book the hotel."
    # A summary given is taken as it is, and no model is asked.
    asked = len(api.requests)
    second = await say(d, "Another thing", sender="+2")
    closed = await op(d, "session.close", session=second["session"], summary="Done.")
    assert (closed["source"], closed["closing_summary"]) == ("given", "Done.")
    assert len(api.requests) == asked + 1  # the turn's call alone
