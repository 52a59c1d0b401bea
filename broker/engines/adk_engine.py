"""`kind = "adk"`: a Google ADK agent runs the turn (docs/adk.md).

Each turn builds an ADK session of its own, in an `InMemorySessionService` that
lives as long as the turn: the broker's assembled context (history, state record,
scratchpad, notes) becomes its events, and the turn's inputs the new message for
ADK's `Runner`. Nothing of it outlives the turn: the broker's ledger stays the one
record of the conversation. Partial text events stream as deltas; each model
response with usage is an `llm` event, each call of one of the agent's own tools
an `action` event, and each transfer to another agent a `decision` event. The
broker's tools are offered as ADK tools beside the agent's own and run through
`io.call_tool` (the broker records those). Messages steered into the turn join the
contents of the agent's next model call (a `before_model_callback` put before the
agent's own, broker/engines/steering.py); an agent it transfers to keeps its own
callbacks and takes none, and an agent that is no `LlmAgent` takes none either.

ADK runs on asyncio only. An abort or the turn's timeout closes the run at once.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from google.adk.agents import BaseAgent, LlmAgent, RunConfig
from google.adk.agents._streaming_mode import StreamingMode
from google.adk.agents.callback_context import CallbackContext
from google.adk.events import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from broker.config import ConfigError, EngineSettings
from broker.engines.base import EngineError, TurnIO
from broker.engines.loader import resolve
from broker.engines.steering import Steering
from core.engine_types import EngineResult, HistoryMessage, ToolCall, ToolSpec, TurnRequest

APP = "agent-broker"


def check_adk_agent(found: object, key: str, reference: str) -> BaseAgent:
    if not isinstance(found, BaseAgent):
        raise ConfigError(
            f"invalid configuration: {key} = {reference!r} is a {type(found).__name__},"
            " not a google.adk agent"
        )
    return found


def load_adk_engine(settings: EngineSettings, key: str = "engine.agent") -> AdkEngine:
    agent = check_adk_agent(resolve(settings.agent, key), key, settings.agent or "")
    return AdkEngine(agent, settings.context_window)


class BrokerTool(BaseTool):
    """A broker tool as an ADK tool: declared with the broker's JSON schema, run by it."""

    def __init__(self, spec: ToolSpec, turn: _Turn) -> None:
        super().__init__(name=spec.name, description=spec.description)
        self.spec = spec
        self.turn = turn

    def _get_declaration(self) -> types.FunctionDeclaration:
        return types.FunctionDeclaration(
            name=self.spec.name,
            description=self.spec.description,
            parameters_json_schema=self.spec.parameters,
        )

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        call_id = tool_context.function_call_id or self.spec.name
        try:
            result, status = await self.turn.io.call_tool(self.spec.name, dict(args), call_id), "ok"
        except EngineError as exc:
            result, status = str(exc), "error"
        self.turn.tool_calls.append(
            ToolCall(call_id, self.spec.name, _json(args), result, status)  # type: ignore[arg-type]
        )
        return {"result": result} if status == "ok" else {"error": result}


def _json(value: Any) -> str:
    import json

    return json.dumps(value, default=str)


def history_events(request: TurnRequest, agent: str) -> list[Event]:
    events: list[Event] = []
    if request.notes:
        notes = "\n".join(f"- {note}" for note in request.notes)
        events.append(_event("user", f"(notes from the broker)\n{notes}"))
    return [*(_history_event(m, agent) for m in request.history), *events]


def _history_event(message: HistoryMessage, agent: str) -> Event:
    if message.role == "assistant":
        return _event(agent, message.content, role="model")
    if message.role == "user":
        return _event("user", _said(message))
    return _event("user", f"(from the broker) {message.content}")


def _said(message: HistoryMessage) -> str:
    """A person's message as ADK sees it: ADK has no sender names, so it goes in front."""
    return f"{message.name}: {message.content}" if message.name else message.content


def _event(author: str, text: str, role: str = "user") -> Event:
    return Event(author=author, content=types.Content(role=role, parts=[types.Part(text=text)]))


class _Turn:
    def __init__(self, io: TurnIO, broker_tools: set[str]) -> None:
        self.io = io
        self.broker_tools = broker_tools
        self.tool_calls: list[ToolCall] = []
        self.final: list[str] = []
        self.streamed = False
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.model: str | None = None
        self.own_calls: dict[str, tuple[str, float]] = {}

    async def take(self, event: Event, started: float) -> float:
        texts = [p.text for p in (event.content.parts or [])] if event.content else []
        text = "".join(t for t in texts if t and not _thought(event, t))
        if event.partial:
            if text:
                self.streamed = True
                await self.io.delta(text)
            return started
        if text and event.author != "user":
            if not self.streamed:
                await self.io.delta(text)
            self.final.append(text)
            self.streamed = False
        now = time.monotonic()
        for call in event.get_function_calls():
            if call.name and call.name not in self.broker_tools:
                self.own_calls[call.id or call.name] = (call.name, now)
        for response in event.get_function_responses():
            own = self.own_calls.pop(response.id or response.name or "", None)
            if own is not None:
                status = (
                    "error"
                    if isinstance(response.response, dict) and "error" in response.response
                    else "ok"
                )
                self.io.event("action", {"by": "adk", "tool": own[0], "status": status,
                                         "duration_ms": round((now - own[1]) * 1000)})  # fmt: skip
        if event.actions and event.actions.transfer_to_agent:
            to = event.actions.transfer_to_agent
            self.io.event(
                "decision", {"by": "adk", "text": f"transferred from {event.author} to {to}"}
            )
        usage = event.usage_metadata
        if usage is not None and event.author != "user":
            prompt, completion = usage.prompt_token_count, usage.candidates_token_count
            self.prompt_tokens += prompt or 0
            self.completion_tokens += completion or 0
            self.model = event.model_version or self.model
            self.io.event("llm", {"model": event.model_version, "prompt_tokens": prompt,
                                  "completion_tokens": completion,
                                  "duration_ms": round((now - started) * 1000),
                                  "stop_reason": "completed"})  # fmt: skip
            return now
        return started


def _thought(event: Event, text: str) -> bool:
    parts = event.content.parts or [] if event.content else []
    return any(p.text == text and p.thought for p in parts)


class AdkEngine:
    name = "adk"

    def __init__(self, agent: BaseAgent, context_window: int) -> None:
        self.agent = agent
        self.context_window = context_window
        self.accepts_steering = isinstance(agent, LlmAgent)

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult:
        agent = self.agent
        own = {getattr(t, "name", None) for t in getattr(agent, "tools", [])}
        specs = [spec for spec in request.tools if spec.name not in own]
        turn = _Turn(io, {spec.name for spec in specs})
        if isinstance(agent, LlmAgent):
            steering: Steering[types.Content] = Steering(
                io, lambda m: types.Content(role="user", parts=[types.Part(text=_said(m))])
            )

            async def steer(callback_context: CallbackContext, llm_request: LlmRequest) -> None:
                llm_request.contents = steering.fold(llm_request.contents)

            agent = agent.clone(
                update={
                    "tools": [*agent.tools, *(BrokerTool(s, turn) for s in specs)],
                    "before_model_callback": [steer, *agent.canonical_before_model_callbacks],
                }
            )
        service = InMemorySessionService()  # this turn's only: the ledger is the record
        session = await service.create_session(
            app_name=APP, user_id="broker", session_id=request.turn_id
        )
        for event in history_events(request, agent.name):
            await service.append_event(session, event)
        said = [  # one part per input, in arrival order
            types.Part(text=_said(m)) for m in request.inputs
        ]
        runner = Runner(app_name=APP, agent=agent, session_service=service)
        started = time.monotonic()
        try:
            async with contextlib.aclosing(
                runner.run_async(
                    user_id="broker",
                    session_id=session.id,
                    new_message=types.Content(role="user", parts=said),
                    run_config=RunConfig(streaming_mode=StreamingMode.SSE),
                )
            ) as events:
                async for event in events:
                    if event.error_message:
                        raise EngineError(f"The agent failed: {event.error_message}")
                    started = await turn.take(event, started)
        finally:
            with contextlib.suppress(Exception):
                await runner.close()
        return EngineResult(
            text="\n\n".join(turn.final),
            prompt_tokens=turn.prompt_tokens or None,
            completion_tokens=turn.completion_tokens or None,
            model=turn.model,
            tool_calls=turn.tool_calls,
        )

    async def aclose(self) -> None:
        return None
