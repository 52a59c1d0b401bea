"""The `langgraph` engine's steering, in process (broker/engines/langgraph_engine.py): a
steered message joins the `messages` state between steps and the next model node sees
it; never between an AI message's tool calls and their answers; and when the graph
refuses the update (two nodes wrote in the step before), the message is not counted
as used, so it runs as the next turn, and no later one is taken."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import add_messages

from broker.engines.langgraph_engine import LangGraphEngine
from core.engine_types import ChatMessage, TurnRequest

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


class Io:
    """Each model step hands the steered message it was given for that step."""

    def __init__(self, at_step: dict[int, list[ChatMessage]]) -> None:
        self.at_step = at_step
        self.step = 0
        self.takes = 0

    async def delta(self, text: str) -> None: ...

    def take_steer(self) -> list[ChatMessage]:
        self.takes += 1
        return self.at_step.pop(self.step, [])

    async def call_tool(
        self, name: str, arguments: dict[str, Any], call_id: str | None = None
    ) -> str:
        return ""

    def event(self, kind: str, data: dict[str, Any]) -> None: ...


def steer(text: str) -> ChatMessage:
    return ChatMessage("user", text, msg_id=f"m-{text}", item_id=f"i-{text}")


def request(text: str) -> TurnRequest:
    return TurnRequest("dm:x", "turn-1", None, (), (ChatMessage("user", text),))


def said(messages: Sequence[BaseMessage]) -> str:
    return " | ".join(str(m.content) for m in messages if isinstance(m, HumanMessage))


def two_model_steps(io: Io) -> Any:
    """model -> model -> END; each model step answers with the people's messages so far."""

    async def model(state: MessagesState) -> dict[str, Any]:
        io.step += 1
        return {"messages": [AIMessage(said(state["messages"]))]}

    builder = StateGraph(MessagesState)
    builder.add_node("first", model)
    builder.add_node("second", model)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    return builder.compile()


async def test_a_steered_message_reaches_the_next_step() -> None:
    io = Io({1: [steer("also")]})
    engine = LangGraphEngine(two_model_steps(io), 8192)
    result = await engine.run(request("hello"), io)
    assert result.text == "hello | also"
    assert result.steer_used == ("i-also",)


class Fan(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    notes: Annotated[list[str], operator.add]


async def test_a_refused_update_leaves_the_message_for_the_next_turn() -> None:
    io = Io({})

    async def left(state: Fan) -> dict[str, Any]:
        io.at_step[io.step] = [steer("late")]  # arrives while both run
        return {"notes": ["left"]}

    async def right(state: Fan) -> dict[str, Any]:
        return {"notes": ["right"]}

    async def answer(state: Fan) -> dict[str, Any]:
        io.at_step[io.step] = [steer("later")]  # not taken: steering stopped
        return {"messages": [AIMessage(said(state["messages"]))]}

    async def after(state: Fan) -> dict[str, Any]:
        return {"notes": ["after"]}

    builder = StateGraph(Fan)
    builder.add_node("left", left)
    builder.add_node("right", right)
    builder.add_node("answer", answer)
    builder.add_node("after", after)
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    builder.add_edge(["left", "right"], "answer")
    builder.add_edge("answer", "after")
    builder.add_edge("after", END)
    engine = LangGraphEngine(builder.compile(), 8192)
    result = await engine.run(request("hello"), io)
    assert result.text == "hello"
    assert result.steer_used == ()  # taken, not used: it runs as the next turn
    assert io.takes == 2  # before the fan-out (nothing), before `answer` (refused); no more
