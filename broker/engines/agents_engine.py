"""`kind = "openai-agents"`: an OpenAI Agents SDK `Agent` runs the turn (docs/agents-sdk.md).

The agent (`agent = "module:attr"`) runs with `Runner.run_streamed` on the broker's
assembled context (history, state record, scratchpad and notes as the broker built
them, then the inputs), with no SDK session: the broker's ledger stays the one
record of the conversation, and the next turn's context comes from it again. Its
text deltas stream to the adapter as they come; each model response is an `llm`
event with its usage, each call of one of the agent's own tools an `action` event,
and each handoff a `decision` event. The broker's tools are offered as function
tools beside the agent's own and run through `io.call_tool` (the broker records
those), so `agent_send` makes a worker whose result comes back as usual.

The SDK runs on asyncio only. An abort or the turn's timeout cancels the run at
once (`RunResultStreaming.cancel`), and the text already streamed stays the turn's
partial output.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from agents import Agent, FunctionTool, RunConfig, Runner, RunResultStreaming
from agents.exceptions import AgentsException, MaxTurnsExceeded
from agents.items import HandoffOutputItem, ToolCallItem, ToolCallOutputItem, TResponseInputItem
from agents.run_config import CallModelData, ModelInputData
from agents.stream_events import RawResponsesStreamEvent, RunItemStreamEvent
from agents.tool_context import ToolContext
from openai.types.responses import ResponseCompletedEvent, ResponseTextDeltaEvent

from broker.config import ConfigError, EngineSettings
from broker.engines.base import EngineError, TurnIO
from broker.engines.loader import resolve
from broker.engines.steering import Steering
from core.engine_types import EngineResult, HistoryMessage, ToolCall, ToolSpec, TurnRequest

MAX_TURNS = 10  # model calls of one broker turn, tool rounds and handoffs included


def check_agent(found: object, key: str, reference: str) -> Agent[Any]:
    if not isinstance(found, Agent):
        raise ConfigError(
            f"invalid configuration: {key} = {reference!r} is a {type(found).__name__},"
            " not an agents.Agent"
        )
    return found


def load_agents_engine(settings: EngineSettings, key: str = "engine.agent") -> AgentsEngine:
    agent = check_agent(resolve(settings.agent, key), key, settings.agent or "")
    return AgentsEngine(agent, settings.context_window)


def input_items(request: TurnRequest, with_system: bool) -> list[TResponseInputItem]:
    """The broker's context as Responses input items, oldest first."""
    items: list[TResponseInputItem] = []
    if with_system and request.system_prompt:
        items.append({"role": "system", "content": request.system_prompt})
    items.extend(_item(m) for m in request.history)
    if request.notes:
        notes = "\n".join(f"- {note}" for note in request.notes)
        items.append({"role": "system", "content": f"Notes from the broker:\n{notes}"})
    items.extend(_item(m) for m in request.inputs)
    return items


def _item(message: HistoryMessage) -> TResponseInputItem:
    if message.role == "user":
        # The Responses API has no sender name: it goes in front of the text.
        text = f"{message.name}: {message.content}" if message.name else message.content
        return {"role": "user", "content": text}
    if message.role == "assistant":
        return {"role": "assistant", "content": message.content}
    if message.role == "tool":
        return {"role": "system", "content": f"Tool output: {message.content}"}
    return {"role": "system", "content": message.content}


class _Turn:
    """One run of the agent: its text, its broker tool calls, its usage."""

    def __init__(self, io: TurnIO) -> None:
        self.io = io
        self.text: list[str] = []
        self.tool_calls: list[ToolCall] = []
        self.broker_tools: set[str] = set()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.model: str | None = None
        self.own_calls: dict[str, tuple[str, float]] = {}  # call id: (tool, began)

    def tool(self, spec: ToolSpec) -> FunctionTool:
        """A broker tool as an SDK function tool that runs it through the broker."""
        self.broker_tools.add(spec.name)

        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            try:
                parsed = json.loads(arguments or "{}")
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict):
                result, status = f"The arguments for {spec.name!r} are not a JSON object.", "error"
            else:
                try:
                    result, status = (
                        await self.io.call_tool(spec.name, parsed, ctx.tool_call_id),
                        "ok",
                    )
                except EngineError as exc:
                    result, status = str(exc), "error"
            self.tool_calls.append(
                ToolCall(ctx.tool_call_id, spec.name, arguments, result, status)  # type: ignore[arg-type]
            )
            return result

        return FunctionTool(
            name=spec.name,
            description=spec.description,
            params_json_schema=spec.parameters,
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    async def follow(self, run: RunResultStreaming) -> None:
        started = time.monotonic()
        async for event in run.stream_events():
            if isinstance(event, RawResponsesStreamEvent):
                data = event.data
                if isinstance(data, ResponseTextDeltaEvent) and data.delta:
                    self.text.append(data.delta)
                    await self.io.delta(data.delta)
                elif isinstance(data, ResponseCompletedEvent):
                    started = self._model_call(data, started)
            elif isinstance(event, RunItemStreamEvent):
                self._item(event)

    def _model_call(self, done: ResponseCompletedEvent, started: float) -> float:
        usage = done.response.usage
        prompt = usage.input_tokens if usage is not None else None
        completion = usage.output_tokens if usage is not None else None
        self.prompt_tokens += prompt or 0
        self.completion_tokens += completion or 0
        self.model = done.response.model or self.model
        now = time.monotonic()
        self.io.event(
            "llm",
            {
                "model": done.response.model,
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "duration_ms": round((now - started) * 1000),
                "stop_reason": done.response.status or "completed",
            },
        )
        return now

    def _item(self, event: RunItemStreamEvent) -> None:
        item = event.item
        if isinstance(item, ToolCallItem):
            name = getattr(item.raw_item, "name", None)
            call_id = getattr(item.raw_item, "call_id", None)
            if isinstance(name, str) and name not in self.broker_tools and call_id:
                self.own_calls[str(call_id)] = (name, time.monotonic())
        elif isinstance(item, ToolCallOutputItem):
            raw = item.raw_item
            call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
            own = self.own_calls.pop(str(call_id), None)
            if own is not None:  # one of the agent's own tools (the broker records its own)
                name, began = own
                self.io.event(
                    "action",
                    {
                        "by": "openai-agents",
                        "tool": name,
                        "status": "ok",
                        "duration_ms": round((time.monotonic() - began) * 1000),
                    },
                )
        elif isinstance(item, HandoffOutputItem):
            self.io.event(
                "decision",
                {
                    "by": "openai-agents",
                    "text": f"handed off from {item.source_agent.name} to {item.target_agent.name}",
                },
            )


class AgentsEngine:
    name = "openai-agents"
    accepts_steering = True

    def __init__(self, agent: Agent[Any], context_window: int, max_turns: int = MAX_TURNS) -> None:
        self.agent = agent
        self.context_window = context_window
        self.max_turns = max_turns
        self.run_config = RunConfig(tracing_disabled=True, workflow_name="agent-broker turn")

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult:
        turn = _Turn(io)
        own = {tool.name for tool in self.agent.tools if isinstance(tool, FunctionTool)}
        offered = [turn.tool(spec) for spec in request.tools if spec.name not in own]
        agent = self.agent.clone(tools=[*self.agent.tools, *offered]) if offered else self.agent
        items = input_items(request, with_system=not self.agent.instructions)
        steering: Steering[TResponseInputItem] = Steering(io, _item)

        def steer(call: CallModelData[Any]) -> ModelInputData:
            call.model_data.input = steering.fold(call.model_data.input)
            return call.model_data

        config = dataclasses.replace(self.run_config, call_model_input_filter=steer)
        run = Runner.run_streamed(agent, items, max_turns=self.max_turns, run_config=config)
        try:
            await turn.follow(run)
        except MaxTurnsExceeded as exc:
            raise EngineError(
                f"The agent kept going after {self.max_turns} model calls; the turn was stopped."
            ) from exc
        except AgentsException as exc:
            raise EngineError(f"The agent failed: {exc}") from exc
        finally:
            run.cancel()  # an abort or a timeout: the SDK's own task stops too
        final = run.final_output
        text = final if isinstance(final, str) else "".join(turn.text)
        if final is not None and not isinstance(final, str):
            text = _as_text(final)
        return EngineResult(
            text=text,
            prompt_tokens=turn.prompt_tokens or None,
            completion_tokens=turn.completion_tokens or None,
            model=turn.model or _model_name(run.last_agent),
            tool_calls=turn.tool_calls,
        )

    async def aclose(self) -> None:
        return None


def _as_text(output: object) -> str:
    dump = getattr(output, "model_dump_json", None)
    if callable(dump):
        return str(dump())
    try:
        return json.dumps(output)
    except TypeError:
        return str(output)


def _model_name(agent: Agent[Any]) -> str | None:
    model = agent.model
    if isinstance(model, str):
        return model
    return getattr(model, "model", None) if model is not None else None
