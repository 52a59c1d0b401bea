"""`kind = "langgraph"`: a compiled LangGraph graph with a `messages` state runs the turn
(docs/langgraph.md).

The graph gets the broker's assembled context as LangChain messages (history, state
record, scratchpad and notes as system messages, then the inputs) and runs once. A
graph compiled with a checkpointer is refused at start: the broker's ledger stays the
one record of the conversation. The engine gives its copy of the graph an in-memory
checkpointer whose thread lives as long as the turn, only to stop before each step:
there a message steered into the turn joins the `messages` state, unless the last
message asks for tool calls not yet answered (a tool node expects them next); a graph
that refuses the update takes no more, and those run as the next turn. A graph
that calls `interrupt()` for a person's answer fails its turn with a sentence.

Its message chunks stream as deltas; each AI message with usage is an `llm` event,
each tool message answering one of the graph's own tools an `action` event. The
broker's tools are handed to the graph as LangChain tools in
`config["configurable"]["broker_tools"]` (`broker_tools(config)` reads them): a graph
binds them to its model and runs them like its own, and the broker runs and records
them.

An abort or the turn's timeout cancels the run at once. LangGraph runs on asyncio
only: the daemon with this engine refuses `--backend trio` at start.
"""

from __future__ import annotations

import json
import time
from contextvars import ContextVar
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError, InvalidUpdateError
from langgraph.pregel import Pregel

from broker.config import ConfigError, EngineSettings
from broker.engines.base import EngineError, TurnIO
from broker.engines.loader import resolve
from core.engine_types import (
    ChatMessage,
    EngineResult,
    HistoryMessage,
    ToolCall,
    ToolSpec,
    TurnRequest,
)

RECURSION_LIMIT = 25  # graph steps of one broker turn


def broker_tools(config: RunnableConfig) -> list[BaseTool]:
    """The broker's tools for this turn, as LangChain tools (inside a graph's node)."""
    tools = (config.get("configurable") or {}).get("broker_tools") or []
    return list(tools)


def check_graph(found: object, key: str, reference: str) -> Pregel[Any, Any]:
    if not isinstance(found, Pregel):
        raise ConfigError(
            f"invalid configuration: {key} = {reference!r} is a {type(found).__name__},"
            " not a compiled LangGraph graph (StateGraph(...).compile())"
        )
    if found.checkpointer not in (None, False):
        raise ConfigError(
            f"invalid configuration: {key} = {reference!r} is compiled with a checkpointer;"
            " the broker's ledger keeps the conversation: compile it without one"
        )
    return found


def load_langgraph_engine(settings: EngineSettings, key: str = "engine.graph") -> LangGraphEngine:
    graph = check_graph(resolve(settings.graph, key), key, settings.graph or "")
    return LangGraphEngine(graph, settings.context_window)


def lc_messages(request: TurnRequest) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    if request.system_prompt:
        out.append(SystemMessage(request.system_prompt))
    out.extend(_message(m) for m in request.history)
    if request.notes:
        notes = "\n".join(f"- {note}" for note in request.notes)
        out.append(SystemMessage(f"Notes from the broker:\n{notes}"))
    out.extend(_message(m) for m in request.inputs)
    return out


def _message(message: HistoryMessage) -> BaseMessage:
    if message.role == "user":
        return (
            HumanMessage(message.content, name=message.name)
            if message.name
            else HumanMessage(message.content)
        )
    if message.role == "assistant":
        return AIMessage(message.content)
    if message.role == "tool":
        return SystemMessage(f"Tool output: {message.content}")
    return SystemMessage(message.content)


# The id of the tool call being run, when the graph invokes a tool with the model's
# ToolCall (as ToolNode does): the broker records the call under it.
CALL_ID: ContextVar[str | None] = ContextVar("langgraph_tool_call_id", default=None)


class _BrokerTool(StructuredTool):
    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        call_id = input.get("id") if isinstance(input, dict) and "args" in input else None
        token = CALL_ID.set(call_id)
        try:
            return await super().ainvoke(input, config, **kwargs)
        finally:
            CALL_ID.reset(token)


class _Turn:
    def __init__(self, io: TurnIO) -> None:
        self.io = io
        self.tool_calls: list[ToolCall] = []
        self.broker_names: set[str] = set()
        self.own_calls: dict[str, tuple[str, float]] = {}
        self.final = ""
        self.streamed: list[str] = []
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.model: str | None = None
        self.started = time.monotonic()
        # The item ids of the steered messages the graph took in; once it refuses
        # one, it takes no more this turn.
        self.steer_used: list[str] = []
        self.steering = True
        self.steer_waiting: list[ChatMessage] = []  # taken, for a step that may take them

    def tool(self, spec: ToolSpec) -> BaseTool:
        self.broker_names.add(spec.name)

        async def invoke(**arguments: Any) -> str:
            call_id = CALL_ID.get()
            try:
                result, status = await self.io.call_tool(spec.name, arguments, call_id), "ok"
            except EngineError as exc:
                result, status = str(exc), "error"
            call = ToolCall(call_id or spec.name, spec.name, json.dumps(arguments), result, status)  # type: ignore[arg-type]
            self.tool_calls.append(call)
            return result

        return _BrokerTool(
            name=spec.name,
            description=spec.description,
            args_schema=spec.parameters,
            coroutine=invoke,
        )

    async def chunk(self, message: Any) -> None:
        text = message.content if isinstance(message, AIMessageChunk) else None
        if isinstance(text, str) and text:
            self.streamed.append(text)
            await self.io.delta(text)

    def update(self, message: Any) -> None:
        now = time.monotonic()
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call["name"] not in self.broker_names:
                    self.own_calls[call.get("id") or call["name"]] = (call["name"], now)
            usage = message.usage_metadata
            if usage:
                self.prompt_tokens += usage.get("input_tokens", 0)
                self.completion_tokens += usage.get("output_tokens", 0)
            model = (message.response_metadata or {}).get("model_name")
            self.model = model or self.model
            self.io.event(
                "llm",
                {
                    "model": model,
                    "prompt_tokens": usage.get("input_tokens") if usage else None,
                    "completion_tokens": usage.get("output_tokens") if usage else None,
                    "duration_ms": round((now - self.started) * 1000),
                    "stop_reason": "tool_calls" if message.tool_calls else "completed",
                },
            )
            self.started = now
            if not message.tool_calls and isinstance(message.content, str):
                self.final = message.content
        elif isinstance(message, ToolMessage):
            own = self.own_calls.pop(message.tool_call_id, None)
            if own is not None:
                self.io.event(
                    "action",
                    {
                        "by": "langgraph",
                        "tool": own[0],
                        "status": "error" if message.status == "error" else "ok",
                        "duration_ms": round((now - own[1]) * 1000),
                    },
                )


def _steerable(messages: object) -> bool:
    """May a user message follow these? Not after an AI message whose tool calls
    no tool message has answered yet."""
    if not isinstance(messages, list) or not messages:
        return False
    last = messages[-1]
    return not (isinstance(last, AIMessage) and last.tool_calls)


class LangGraphEngine:
    name = "langgraph"
    accepts_steering = True

    def __init__(self, graph: Pregel[Any, Any], context_window: int) -> None:
        self.graph = graph
        self.context_window = context_window
        self.saver = InMemorySaver()  # a thread per turn, deleted when it ends
        self.stepped = graph.copy(update={"checkpointer": self.saver})

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult:
        turn = _Turn(io)
        tools = [turn.tool(spec) for spec in request.tools]
        config: RunnableConfig = {
            "configurable": {"broker_tools": tools, "thread_id": request.turn_id},
            "recursion_limit": RECURSION_LIMIT,
        }
        try:
            await self._steps(turn, {"messages": lc_messages(request)}, config)
        except GraphRecursionError as exc:
            raise EngineError(
                f"The graph ran {RECURSION_LIMIT} steps without an answer; the turn was stopped."
            ) from exc
        finally:
            await self.saver.adelete_thread(request.turn_id)
        text = turn.final or "".join(turn.streamed)
        if text and not turn.streamed:
            await io.delta(text)
        return EngineResult(
            text=text,
            prompt_tokens=turn.prompt_tokens or None,
            completion_tokens=turn.completion_tokens or None,
            model=turn.model,
            tool_calls=turn.tool_calls,
            steer_used=tuple(turn.steer_used),
        )

    async def _steps(
        self, turn: _Turn, given: dict[str, Any] | None, config: RunnableConfig
    ) -> None:
        """Run the graph a step at a time, steered messages joining between steps."""
        while True:
            paused = False
            async for mode, payload in self.stepped.astream(
                given, config, stream_mode=["messages", "updates"], interrupt_before="*"
            ):
                if mode == "messages":
                    await turn.chunk(payload[0])
                elif mode == "updates" and isinstance(payload, dict):
                    if "__interrupt__" in payload:
                        paused = True
                        if payload["__interrupt__"]:  # the graph's own interrupt()
                            raise EngineError(
                                "The graph stopped for a person's answer (interrupt()), which"
                                " the broker cannot give; the turn was stopped."
                            )
                        continue
                    for update in payload.values():
                        messages = update.get("messages", []) if isinstance(update, dict) else []
                        for message in messages if isinstance(messages, list) else [messages]:
                            turn.update(message)
            if not paused:
                return
            if turn.steering:
                await self._steer(turn, config)
            given = None

    async def _steer(self, turn: _Turn, config: RunnableConfig) -> None:
        """Steered messages join the state, unless the last message asks for tool calls
        not yet answered (they wait for a later step). If the graph refuses the update
        (two nodes wrote in the step before, say), they and any later ones run as the
        next turn instead."""
        turn.steer_waiting.extend(turn.io.take_steer())
        if not turn.steer_waiting:
            return
        state = await self.stepped.aget_state(config)
        if not _steerable(state.values.get("messages")):
            return
        taken, turn.steer_waiting = turn.steer_waiting, []
        try:
            await self.stepped.aupdate_state(config, {"messages": [_message(m) for m in taken]})
        except InvalidUpdateError:
            turn.steering = False
            return
        turn.steer_used.extend(m.item_id or "" for m in taken)

    async def aclose(self) -> None:
        return None
