"""A LangGraph graph behind the broker (docs/langgraph.md).

    [engine]
    kind = "langgraph"
    graph = "agent_langgraph:graph"   # this file, beside the config file or on sys.path

`build` makes a model node that binds the graph's own tools and the broker's tools
(handed to the graph in its config: `broker_tools(config)`), and a tool node that runs
them by name with the model's ToolCall (so the broker links a worker to the call that
made it). Set `chat_model` to any LangChain chat model; compile without a checkpointer:
the broker's ledger keeps the conversation. The broker's tests run this same graph on
a fake chat model (tests/integration/lg_agent.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from broker.engines.langgraph_engine import broker_tools


@tool
def word_count(text: str) -> int:
    """How many words `text` has."""
    return len(text.split())


def chat_model() -> BaseChatModel:
    from langchain_openai import ChatOpenAI  # type: ignore[import-not-found]  # pip install langchain-openai

    model: BaseChatModel = ChatOpenAI(model="gpt-4o-mini")
    return model


def build(model: Callable[[], BaseChatModel], own: list[BaseTool]) -> CompiledStateGraph[Any]:
    """The graph: `model()` answers, with `own` and the broker's tools bound to it."""

    async def call_model(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        bound = model().bind_tools([*own, *broker_tools(config)])
        return {"messages": [await bound.ainvoke(state["messages"], config)]}

    async def run_tools(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        by_name = {t.name: t for t in [*own, *broker_tools(config)]}
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
    return builder.compile()


graph = build(chat_model, [word_count])
