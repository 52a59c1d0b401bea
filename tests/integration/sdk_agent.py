"""An OpenAI Agents SDK agent on a fake model, for the daemon's `openai-agents` engine tests.

The model is the SDK's own `Model` interface over its `agents.testing.ScriptedModel`:
each call decides from the conversation what to answer, so one agent serves a
whole test. The test copies this file (and agent_rules.py) into the daemon's folder
and names `sdk_agent:agent`.

- a function call output last: "tool said: <output>";
- "[worker ...]": "worker done: <the worker's reply>";
- "weather": calls the agent's own tool `get_weather`;
- "hold": calls the agent's own tool `hold`, which writes the file `holding` and
  answers "held" once the file `release` exists: a tool call to steer a message into;
- "also": "heard: <text>" (the steered message, when it reaches a model call);
- "delegate": calls the broker tool `agent_send` with the task "count to three";
- "count to three" (the worker): "one two three";
- "spanish": hands off to the agent `spanish`, which says "hola";
- "slow": streams "working", then waits 30 s before its response completes, the
  first time in this folder only (a file marks it): a turn to interrupt or crash;
- anything else: "Hi there: <text>".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agents import Agent, Model, function_tool
from agents.items import ModelResponse, TResponseStreamEvent
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage

if TYPE_CHECKING:
    from tests.integration.agent_rules import first_slow, wait_for_release
else:  # copied beside this file
    from agent_rules import first_slow, wait_for_release


def _text(item: Any) -> str:
    content = item.get("content") if isinstance(item, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def decide(call: ModelCall) -> Any:
    items = (
        call.input if isinstance(call.input, list) else [{"role": "user", "content": call.input}]
    )
    last = items[-1] if items else {}
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        if call.system_instructions and "Spanish" in call.system_instructions:
            return [assistant_message("hola")]
        return [assistant_message(f"tool said: {last.get('output')}")]
    users = [_text(i) for i in items if isinstance(i, dict) and i.get("role") == "user"]
    said = users[-1] if users else ""
    if said.startswith("[worker") or ": [worker" in said:
        return [assistant_message("worker done: " + said.split("\n", 1)[-1].strip())]
    if "also" in said:
        return [assistant_message(f"heard: {said}")]
    if "weather" in said:
        return [function_call("get_weather", {"city": "Paris"}, call_id="w1")]
    if "hold" in said:
        return [function_call("hold", {}, call_id="h0")]
    if "delegate" in said:
        return [function_call("agent_send", {"task": "count to three"}, call_id="d1")]
    if "count to three" in said:
        return [assistant_message("one two three")]
    if "spanish" in said:
        return [function_call("transfer_to_spanish", {}, call_id="h1")]
    if "slow" in said:
        return [assistant_message("working")]
    return [assistant_message(f"Hi there: {said}")]


class RuleModel(Model):
    """The SDK's Model interface, each call answered by `decide`."""

    def _script(self) -> ScriptedModel:
        usage = Usage(requests=1, input_tokens=11, output_tokens=7, total_tokens=18)
        return ScriptedModel([ModelStep.respond(decide)], default_usage=usage)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return await self._script().get_response(*args, **kwargs)

    async def stream_response(
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[TResponseStreamEvent]:
        items = args[1] if isinstance(args[1], list) else []
        # Marked before the delta a test acts on.
        slow = bool(items) and "slow" in _text(items[-1]) and first_slow()
        async for event in self._script().stream_response(*args, **kwargs):
            if slow and event.type == "response.completed":
                await asyncio.sleep(30)
            yield event


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@function_tool
async def hold() -> str:
    """Wait for the test."""
    return await wait_for_release()


spanish = Agent(name="spanish", instructions="You answer in Spanish.", model=RuleModel())
agent = Agent(
    name="helper",
    instructions="You help.",
    model=RuleModel(),
    tools=[get_weather, hold],
    handoffs=[spanish],
)
