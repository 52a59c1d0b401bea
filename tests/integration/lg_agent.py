"""A compiled LangGraph graph on LangChain's fake chat model, for the daemon's `langgraph`
engine tests; the same rules as tests/integration/sdk_agent.py. The test copies this
file into the daemon's folder and names `lg_agent:graph`.

The graph: a model node that binds the graph's own tool and the broker's tools (read
from the config with `broker_tools`), and a tool node that runs the calls by name.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph

from broker.engines.langgraph_engine import broker_tools

SLOW_MARK = Path("slow-ran-once")


def first_slow() -> bool:
    if SLOW_MARK.exists():
        return False
    SLOW_MARK.write_text("ran")
    return True


def decide(messages: list[BaseMessage]) -> AIMessage:
    usage = {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(f"tool said: {last.content}", usage_metadata=usage)
    said = str(last.content)
    if "[worker" in said:
        return AIMessage("worker done: " + said.split("\n", 1)[-1].strip(), usage_metadata=usage)
    if "weather" in said:
        call = {"name": "get_weather", "args": {"city": "Paris"}, "id": "w1"}
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

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


OWN: list[BaseTool] = [get_weather]
model = RuleChatModel()


async def call_model(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
    slow = "slow" in str(state["messages"][-1].content) and first_slow()  # marked before
    bound = model.bind_tools([*OWN, *broker_tools(config)])
    reply = await bound.ainvoke(state["messages"], config)
    if slow:
        await asyncio.sleep(30)
    return {"messages": [reply]}


async def run_tools(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
    by_name = {t.name: t for t in [*OWN, *broker_tools(config)]}
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    # Invoked with the ToolCall itself, as ToolNode does: the answer is a ToolMessage.
    return {"messages": [await by_name[c["name"]].ainvoke(c, config) for c in last.tool_calls]}


def route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


builder = StateGraph(MessagesState)
builder.add_node("model", call_model)
builder.add_node("tools", run_tools)
builder.add_edge(START, "model")
builder.add_conditional_edges("model", route, ["tools", END])
builder.add_edge("tools", "model")
graph = builder.compile()
