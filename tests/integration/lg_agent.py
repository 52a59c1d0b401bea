"""The graph of examples/agent_langgraph.py on LangChain's fake chat model, for the daemon's
`langgraph` engine tests; the same rules as tests/integration/sdk_agent.py. The test
copies this file, agent_rules.py and the example into the daemon's folder and names
`lg_agent:graph`.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool

if TYPE_CHECKING:
    from examples.agent_langgraph import build
    from tests.integration.agent_rules import first_slow, wait_for_release
else:  # copied beside this file
    from agent_langgraph import build
    from agent_rules import first_slow, wait_for_release


def decide(messages: list[BaseMessage]) -> AIMessage:
    usage = {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(f"tool said: {last.content}", usage_metadata=usage)
    said = str(last.content)
    if "[worker" in said:
        return AIMessage("worker done: " + said.split("\n", 1)[-1].strip(), usage_metadata=usage)
    if "also" in said:
        return AIMessage(f"heard: {said}", usage_metadata=usage)
    if "weather" in said:
        call = {"name": "get_weather", "args": {"city": "Paris"}, "id": "w1"}
        return AIMessage("", tool_calls=[call], usage_metadata=usage)
    if "hold" in said:
        call = {"name": "hold", "args": {}, "id": "h0"}
        return AIMessage("", tool_calls=[call], usage_metadata=usage)
    if "delegate" in said:
        call = {"name": "agent_send", "args": {"task": "count to three"}, "id": "d1"}
        return AIMessage("", tool_calls=[call], usage_metadata=usage)
    if "count to three" in said:
        return AIMessage("one two three", usage_metadata=usage)
    if "slow" in said:
        return AIMessage("working", usage_metadata=usage)
    return AIMessage(f"Hi there: {said}", usage_metadata=usage)


class RuleChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, each answer decided from the conversation."""

    messages: Any = iter(())

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=decide(messages))])

    def _stream(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Iterator[Any]:
        """Text word by word, as the fake model streams it, the usage on the last chunk;
        tool calls in one chunk."""
        answer = decide(messages)
        if answer.tool_calls:
            calls = [
                {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
                for i, c in enumerate(answer.tool_calls)
            ]
            chunk = AIMessageChunk(
                content="", tool_call_chunks=calls, usage_metadata=answer.usage_metadata
            )
            yield ChatGenerationChunk(message=chunk)
            return
        words = [w for w in re.split(r"(\s)", str(answer.content)) if w]
        for n, word in enumerate(words):
            last = n == len(words) - 1
            usage = answer.usage_metadata if last else None
            yield ChatGenerationChunk(message=AIMessageChunk(content=word, usage_metadata=usage))

    async def _astream(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        """As `_stream`; a slow answer waits 30 s after its text, the first time."""
        slow = "slow" in str(messages[-1].content) and first_slow()  # marked before
        for chunk in self._stream(messages, *args, **kwargs):
            yield chunk
        if slow:
            await asyncio.sleep(30)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@tool
async def hold() -> str:
    """Wait for the test."""
    return await wait_for_release()


model = RuleChatModel()
graph = build(lambda: model, [get_weather, hold])
