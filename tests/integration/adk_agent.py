"""A Google ADK agent on a fake model (ADK's own `BaseLlm` interface), for the daemon's
`adk` engine tests; the same rules as tests/integration/sdk_agent.py. The test copies
this file (and agent_rules.py) into the daemon's folder and names `adk_agent:root_agent`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

if TYPE_CHECKING:
    from tests.integration.agent_rules import first_slow, wait_for_release
else:  # copied beside this file
    from agent_rules import first_slow, wait_for_release


def text_of(content: types.Content) -> str:
    return "".join(p.text or "" for p in content.parts or [])


def reply(text: str) -> LlmResponse:
    usage = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=11, candidates_token_count=7, total_token_count=18
    )
    return LlmResponse(
        content=types.Content(role="model", parts=[types.Part(text=text)]),
        usage_metadata=usage,
        model_version="fake-adk",
    )


def call(name: str, args: dict[str, object]) -> LlmResponse:
    part = types.Part(function_call=types.FunctionCall(name=name, args=args))
    return LlmResponse(content=types.Content(role="model", parts=[part]))


class RuleLlm(BaseLlm):
    model: str = "fake-adk"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        answered = [p.function_response for p in last.parts or [] if p.function_response]
        if answered:
            result = answered[0].response or {}
            yield reply(f"tool said: {result.get('result', result)}")
            return
        said = (last.parts or [types.Part(text="")])[-1].text or ""  # the latest input
        if "[worker" in said:
            yield reply("worker done: " + said.split("\n", 1)[-1].strip())
        elif "also" in said:
            yield reply(f"heard: {said}")
        elif "weather" in said:
            yield call("get_weather", {"city": "Paris"})
        elif "hold" in said:
            yield call("hold", {})
        elif "delegate" in said:
            yield call("agent_send", {"task": "count to three"})
        elif "count to three" in said:
            yield reply("one two three")
        elif "slow" in said:
            wait = first_slow()  # marked before the delta a test acts on
            if stream:
                yield LlmResponse(
                    content=types.Content(role="model", parts=[types.Part(text="working")]),
                    partial=True,
                )
            if wait:
                await asyncio.sleep(30)
            yield reply("working")
        else:
            yield reply(f"Hi there: {said}")


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def hold() -> str:
    """Wait for the test."""
    return await wait_for_release()


root_agent = LlmAgent(
    name="helper", model=RuleLlm(), instruction="You help.", tools=[get_weather, hold]
)
