"""The pure parts of the agent's tools: the scratchpad's renderings and their place in
the context (packing), the compaction model, and the broker's tool-call ids."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.config import Settings
from broker.mailbox import turn_parts
from broker.mailbox.running_turn import RunningTurn
from core.engine_types import ToolCall
from core.packing import SCRATCHPAD_SHARE, ContextInput, Msg, assemble
from core.scratchpad import POINTER_KEYS, renderings
from tests.unit.test_context import context_inputs


def test_an_empty_pad_is_not_shown_and_a_full_one_has_two_renderings() -> None:
    assert renderings({}) == () and renderings(None) == ()
    whole, pointer = renderings({"b": [1], "a": {"x": None}})
    assert whole.endswith('\n{"a":{"x":null},"b":[1]}')
    assert pointer == "Your scratchpad has 2 entries (a, b): read them with scratchpad_get."
    many = renderings({f"k{n:02}": n for n in range(30)})[1]
    assert f"k{POINTER_KEYS - 1:02}" in many and f"k{POINTER_KEYS:02}" not in many
    assert "and 25 more" in many


def pad(*sizes: int) -> tuple[Msg, ...]:
    return tuple(Msg("system", f"pad {n}", size) for n, size in enumerate(sizes))


@given(context_inputs(), st.lists(st.integers(0, 300), max_size=3))
def test_the_pad_goes_in_only_where_it_fits(base: ContextInput, sizes: list[int]) -> None:
    without = assemble(base)
    plan = assemble(replace(base, scratchpad=pad(*sizes)))
    assert plan.over_budget == without.over_budget  # the pad never tips a plan over
    # What the pad finds taken: the fixed parts and the state that went in;
    # the bridge note takes its room after the pad.
    bridge = without.bridge.tokens if without.bridge is not None else 0
    fixed = without.tokens - sum(m.tokens for m in without.history) - bridge
    room = min(base.budget - fixed, int(base.budget * SCRATCHPAD_SHARE))
    fitting = [m for m in pad(*sizes) if m.tokens <= room]
    if without.over_budget or not fitting:
        assert plan.scratchpad is None and plan.messages == without.messages
        return
    assert plan.scratchpad == fitting[0]  # the best rendering that fits
    assert plan.tokens <= plan.budget
    head = [m for m in (base.system, without.state) if m is not None]
    assert list(plan.messages[: len(head) + 1]) == [*head, fitting[0]]  # after the state


def settings(**config: Any) -> Settings:
    return Settings(**config)


def test_the_compaction_model_comes_from_the_persona_its_engine_or_the_turns() -> None:
    s = settings(
        engine={"compaction_model": "cheap"},
        engines={"big": {"kind": "echo", "compaction_model": "big-cheap"}, "plain": {}},
        personas={
            "own": {"compaction_model": "mine", "model": "m"},
            "on_big": {"engine": "big", "model": "m"},
            "on_plain": {"engine": "plain", "model": "m"},
            "default": {"model": "m"},
        },
    )
    picks = {p: turn_parts.compaction_model(s, p) for p in (None, "own", "on_big", "on_plain")}
    assert picks == {None: "cheap", "own": "mine", "on_big": "big-cheap", "on_plain": "m"}
    assert turn_parts.compaction_model(s, "default") == "cheap"
    assert turn_parts.compaction_model(settings(), None) is None


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_tool_call_runs_and_is_recorded_under_the_brokers_id(anyio_backend: str) -> None:
    seen: list[str] = []

    async def tools(name: str, args: dict[str, Any], call: str) -> str:
        seen.append(call)
        await anyio.lowlevel.checkpoint()
        return "ok"

    turn = RunningTurn("t1", 1, "o1", "dm:a", None, lambda *a: None, tools=tools)
    await turn.call_tool("agent_send", {}, "engine-1")
    await turn.call_tool("scratchpad_get", {})  # an engine that gives no id
    assert len(seen) == 2 and len(set(seen)) == 2 and turn.call_ids == {"engine-1": seen[0]}
    calls = [ToolCall("engine-1", "agent_send", "{}", "ok", "ok"),
             ToolCall("own", "other", "{}", "ok", "ok")]  # fmt: skip
    assert [c.id for c in turn_parts._broker_ids(calls, turn.call_ids)] == [seen[0], "own"]
    assert turn_parts._broker_ids(calls, None) is calls
