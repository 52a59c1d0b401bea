"""`remember` (broker/tools/session.py): its successful calls become key decisions of
the session-state record (core/session_state.py), kept while the thread goes on; a
malformed call is refused and keeps nothing."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.engines.base import EngineError
from broker.tools import table as tools
from core.engine_types import ToolCall
from core.session_state import (
    EMPTY,
    MAX_DECISIONS,
    REMEMBER_KINDS,
    TurnFacts,
    advance,
    remembered,
    render,
)


def remember_call(kind: str, text: str, status: str = "ok") -> ToolCall:
    args = json.dumps({"kind": kind, "text": text})
    return ToolCall("c1", "remember", args, "kept", status)  # type: ignore[arg-type]


def turn(*calls: ToolCall) -> TurnFacts:
    return TurnFacts("turn", "completed", inputs=(("person", "hi"),), tool_calls=calls)


def test_each_kind_is_kept_among_the_key_decisions_named_so() -> None:
    state = advance(
        EMPTY,
        turn(
            remember_call("decision", "Plain SQL, no ORM"),
            remember_call("constraint", "Answer in French"),
            remember_call("fact", "Sarah is Bob's mother\nsecond line dropped"),
        ),
    )
    assert [d.text for d in state.decisions] == [
        "Plain SQL, no ORM",
        "constraint: Answer in French",
        "fact: Sarah is Bob's mother",
    ]
    text = render(state)
    assert text is not None and "- constraint: Answer in French (turn 1)" in text
    assert not state.files  # its arguments name no file


def test_a_failed_or_malformed_call_keeps_nothing() -> None:
    for call in (
        remember_call("decision", "x", status="error"),
        remember_call("wish", "x"),
        remember_call("fact", "   "),
        ToolCall("c1", "remember", "not json", "?", "ok"),
        ToolCall("c1", "remember", "[1]", "?", "ok"),
    ):
        assert advance(EMPTY, turn(call)).decisions == ()


@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=40))
def test_a_remembered_line_stays_until_ten_newer_ones_push_it_out(texts: list[str]) -> None:
    state = EMPTY
    for text in texts:
        state = advance(state, turn(remember_call("decision", text)))
        state = advance(state, turn())  # turns in between keep it
    kept = [d.text for d in state.decisions]
    assert len(kept) <= MAX_DECISIONS
    wanted = [
        line for t in texts if (line := remembered(json.dumps({"kind": "decision", "text": t})))
    ]
    assert kept == list(dict.fromkeys(reversed(wanted)))[:MAX_DECISIONS][::-1]


@pytest.mark.anyio
async def test_the_tool_refuses_what_it_cannot_keep() -> None:
    hub = cast(Any, SimpleNamespace(mcp=None))
    assert "decision" in await tools.call(
        hub, "dm:a", "t1", "remember", {"kind": "decision", "text": "x"}
    )
    for bad in ({"kind": "wish", "text": "x"}, {"kind": "fact"}, {"kind": "fact", "text": " "}):
        with pytest.raises(EngineError, match="remember"):
            await tools.call(hub, "dm:a", "t1", "remember", bad)
    assert set(REMEMBER_KINDS) == {"decision", "constraint", "fact"}
