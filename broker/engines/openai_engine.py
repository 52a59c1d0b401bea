"""The OpenAI engine: chat completions over any OpenAI-compatible API.

One turn is one or more streamed chat-completion calls: the context becomes
messages (system prompt, history, broker notes as one system message, the
inputs as user messages with the sender's name), content deltas go to
`io.delta` as they arrive, and tool calls the model makes are run through
`io.call_tool` and answered before the model is called again. It takes no steering:
a chat completion cannot take new input once it has started.

At most `max_tool_rounds` rounds of tool calls per turn; the round after that is made
with `tool_choice="none"`, and a model that still calls tools fails the turn. API
failures become `EngineError` with a sentence for people; a prompt too long for the
model becomes `reason="context_overflow"`. Cancellation is never caught, and the
response is closed on the way out.

One client (and its connection pool) serves all turns, as building one sets up TLS;
it is made at the first turn, so it belongs to the running event loop, and `aclose()`
closes it at shutdown. The stream is read as raw server-sent events through
`with_streaming_response` and always to the end of the body: the SDK's `AsyncStream`
stops at ``[DONE]`` and abandons an async generator, which trio reports as a
ResourceWarning.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio
from openai import (
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    AsyncOpenAI,
    Omit,
    OpenAIError,
    omit,
)
from openai.types.chat import (
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
    ChatCompletionToolChoiceOptionParam,
    ChatCompletionToolParam,
)

from broker.engines.base import EngineError, TurnIO
from core.engine_types import (
    EngineResult,
    HistoryMessage,
    ToolCall,
    ToolSpec,
    TurnRequest,
)

if TYPE_CHECKING:
    import httpx2  # the openai SDK's HTTP client (a fork of httpx)

ClientFactory = Callable[[str | None, str | None], AsyncOpenAI]
CLOSE_TIMEOUT_S = 2.0
MAX_EVENT_BYTES = 16 << 20
_OVERFLOW = re.compile(
    r"maximum context length|context[_ ]length[_ ]exceeded|context window"
    r"|exceeds? the (available )?context",
    re.IGNORECASE,
)
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def default_client(base_url: str | None, api_key: str | None) -> AsyncOpenAI:
    """A client for `base_url`; local servers get a dummy key if none is set."""
    key = api_key or os.environ.get("OPENAI_API_KEY") or ("unused" if base_url else None)
    if key is None:
        raise EngineError("No key for the model API: set engine.api_key or OPENAI_API_KEY.")
    return AsyncOpenAI(base_url=base_url, api_key=key)


# -- requests -----------------------------------------------------------------------


def build_messages(request: TurnRequest) -> list[ChatCompletionMessageParam]:
    messages: list[ChatCompletionMessageParam] = []
    if request.system_prompt:
        messages.append({"role": "system", "content": request.system_prompt})
    messages.extend(chat_message(m) for m in request.history)
    if request.notes:
        notes = "\n".join(f"- {note}" for note in request.notes)
        messages.append({"role": "system", "content": f"Notes from the broker:\n{notes}"})
    messages.extend(chat_message(m) for m in request.inputs)
    return messages


def chat_message(message: HistoryMessage) -> ChatCompletionMessageParam:
    if message.role == "user":
        name = _NAME_UNSAFE.sub("_", message.name or "").strip("_")[:64]
        if name:
            return {"role": "user", "content": message.content, "name": name}
        return {"role": "user", "content": message.content}
    if message.role == "assistant":
        return {"role": "assistant", "content": message.content}
    if message.role == "tool":  # no call id survives in history: keep it as context
        return {"role": "system", "content": f"Tool output: {message.content}"}
    return {"role": "system", "content": message.content}


def build_tools(tools: Sequence[ToolSpec]) -> list[ChatCompletionToolParam]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


# -- streamed replies ---------------------------------------------------------------


class SSEDecoder:
    """Server-sent events from raw bytes: each event's data text (no I/O)."""

    def __init__(self, limit: int = MAX_EVENT_BYTES) -> None:
        self.limit = limit
        self.buffer = bytearray()
        self.data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        self.buffer += chunk
        events: list[str] = []
        while (index := self.buffer.find(b"\n")) >= 0:
            line = bytes(self.buffer[:index]).rstrip(b"\r").decode("utf-8", "replace")
            del self.buffer[: index + 1]
            if not line and self.data:
                events.append("\n".join(self.data))
                self.data = []
            elif line.startswith("data:"):
                self.data.append(line[5:].removeprefix(" "))
        if len(self.buffer) > self.limit:
            raise EngineError("The model API sent a stream event larger than 16 MiB.")
        return events

    def finish(self) -> list[str]:
        return self.feed(b"\n\n")


@dataclass(slots=True)
class PendingCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class RoundReply:
    """One streamed completion, accumulated chunk by chunk (no I/O).

    Chunks are read as plain JSON, leniently: local servers differ in the
    fields they send, and a missing field must not fail the turn.
    """

    text: list[str] = field(default_factory=list)
    calls: dict[int, PendingCall] = field(default_factory=dict)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str | None = None
    done: bool = False  # [DONE] seen; the rest of the body is drained unread
    error: dict[str, Any] | None = None  # an error event in the stream
    finish_reason: str | None = None

    def absorb(self, chunk: dict[str, Any]) -> str:
        """Take one chunk in; return its new reply text ("" if none)."""
        model = chunk.get("model")
        self.model = model if isinstance(model, str) and model else self.model
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _int(usage.get("prompt_tokens"))
            self.completion_tokens = _int(usage.get("completion_tokens"))
        text = ""
        for choice in _dicts(chunk.get("choices")):
            delta = choice.get("delta")
            if choice.get("index", 0) != 0 or not isinstance(delta, dict):
                continue
            finish = choice.get("finish_reason")
            self.finish_reason = finish if isinstance(finish, str) else self.finish_reason
            content = delta.get("content")
            text += content if isinstance(content, str) else ""
            for call in _dicts(delta.get("tool_calls")):
                self._absorb_call(call)
        if text:
            self.text.append(text)
        return text

    def _absorb_call(self, delta: dict[str, Any]) -> None:
        index = delta.get("index", 0)
        call = self.calls.setdefault(index if isinstance(index, int) else 0, PendingCall())
        call.id = call.id or _str(delta.get("id"))
        function = delta.get("function")
        if isinstance(function, dict):
            call.name = call.name or _str(function.get("name"))
            call.arguments.append(_str(function.get("arguments")))

    def tool_calls(self) -> list[tuple[str, str, str]]:
        """(id, name, arguments JSON) for each call, in index order."""
        return [
            (call.id or f"call_{index}", call.name, "".join(call.arguments))
            for index, call in sorted(self.calls.items())
        ]


def _dicts(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_arguments(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# -- errors -------------------------------------------------------------------------


def _detail(exc: OpenAIError) -> str:
    body = exc.body if isinstance(exc, APIError) else None
    message = body.get("message") if isinstance(body, dict) else None
    if not isinstance(message, str) or not message:
        message = exc.message if isinstance(exc, APIError) else str(exc)
    return message.strip().rstrip(".")


def is_context_overflow(exc: OpenAIError) -> bool:
    if isinstance(exc, APIError) and exc.code == "context_length_exceeded":
        return True
    return bool(_OVERFLOW.search(_detail(exc)))


def stream_error(error: dict[str, Any], request: httpx2.Request) -> APIError:
    """An error event inside a 200 stream, as the SDK would raise it."""
    message = error.get("message")
    text = message if isinstance(message, str) and message else "An error occurred during streaming"
    return APIError(text, request, body=error)


def engine_error(exc: OpenAIError, where: str) -> EngineError:
    """An API failure as a sentence for people."""
    detail = _detail(exc)
    if is_context_overflow(exc):
        return EngineError(
            f"The conversation is too long for the model's context window: {detail}.",
            reason="context_overflow",
        )
    if isinstance(exc, APITimeoutError):
        return EngineError(f"The model API at {where} did not answer in time.")
    if isinstance(exc, APIConnectionError):
        return EngineError(f"Cannot reach the model API at {where}: {detail}.")
    if isinstance(exc, APIStatusError):
        return EngineError(f"The model API answered with HTTP {exc.status_code}: {detail}.")
    return EngineError(f"The model API failed: {detail}.")


# -- one turn -----------------------------------------------------------------------


class _Turn:
    def __init__(
        self, client: AsyncOpenAI, model: str, request: TurnRequest, io: TurnIO, rounds: int
    ) -> None:
        self.client = client
        self.model = model
        self.io = io
        self.max_tool_rounds = rounds
        self.messages = build_messages(request)
        self.tools = build_tools(request.tools)
        self.text: list[str] = []
        self.tool_calls: list[ToolCall] = []
        self.usage: list[tuple[int | None, int | None]] = []
        self.answered_by: str | None = None
        self.separate = False

    async def run(self) -> EngineResult:
        for round_number in range(self.max_tool_rounds + 1):
            started = anyio.current_time()
            reply = await self._complete(last=round_number == self.max_tool_rounds)
            self.usage.append((reply.prompt_tokens, reply.completion_tokens))
            self.io.event(  # each round is a model call of its own (base.py TurnIO.event)
                "llm",
                {
                    "model": reply.model or self.model,
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                    "duration_ms": round((anyio.current_time() - started) * 1000),
                    "stop_reason": reply.finish_reason,
                    "round": round_number + 1,
                },
            )
            self.answered_by = reply.model or self.answered_by
            if not reply.calls:
                return self._result()
            if round_number == self.max_tool_rounds:
                break
            await self._run_tools(reply)
        raise EngineError(
            f"The model kept calling tools after {self.max_tool_rounds} rounds; "
            "the turn was stopped."
        )

    async def _complete(self, *, last: bool) -> RoundReply:
        tools: list[ChatCompletionToolParam] | Omit = self.tools or omit
        choice: ChatCompletionToolChoiceOptionParam | Omit = "none" if last and self.tools else omit
        reply = RoundReply()
        self.separate = bool(self.text)
        async with self.client.chat.completions.with_streaming_response.create(
            model=self.model,
            messages=self.messages,
            stream=True,
            stream_options={"include_usage": True},
            tools=tools,
            tool_choice=choice,
        ) as response:
            http = response.http_response
            decoder = SSEDecoder()
            async with contextlib.aclosing(http.aiter_bytes()) as body:
                async for data in body:  # read to the end: see the module docstring
                    for event in decoder.feed(data):
                        await self._event(event, reply)
            for event in decoder.finish():
                await self._event(event, reply)
            if reply.error is not None:
                raise stream_error(reply.error, http.request)
        return reply

    async def _event(self, event: str, reply: RoundReply) -> None:
        if reply.done or reply.error is not None:
            return
        if event.strip() == "[DONE]":
            reply.done = True
            return
        try:
            chunk = json.loads(event)
        except ValueError:
            chunk = {"error": {"message": "the model API sent a stream event that is not JSON"}}
        if not isinstance(chunk, dict):
            return
        if isinstance(chunk.get("error"), dict):
            reply.error = chunk["error"]
            return
        text = reply.absorb(chunk)
        if text and self.separate:  # a new round's text starts a new paragraph
            text, self.separate = "\n\n" + text, False
        if text:
            self.text.append(text)
            await self.io.delta(text)

    async def _run_tools(self, reply: RoundReply) -> None:
        calls = reply.tool_calls()
        wire: list[ChatCompletionMessageFunctionToolCallParam] = [
            {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}
            for id_, name, args in calls
        ]
        content = "".join(reply.text) or None
        self.messages.append({"role": "assistant", "content": content, "tool_calls": wire})
        for call_id, name, arguments in calls:
            result, status = await self._call_tool(name, arguments, call_id)
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
            self.tool_calls.append(ToolCall(call_id, name, arguments, result, status))

    async def _call_tool(
        self, name: str, arguments: str, call_id: str
    ) -> tuple[str, Literal["ok", "error"]]:
        parsed = parse_arguments(arguments)
        if parsed is None:
            return f"The arguments for {name!r} are not a JSON object.", "error"
        try:
            return await self.io.call_tool(name, parsed, call_id), "ok"
        except EngineError as exc:
            return str(exc), "error"

    def _result(self) -> EngineResult:
        prompts = [p for p, _ in self.usage if p is not None]
        completions = [c for _, c in self.usage if c is not None]
        return EngineResult(
            text="".join(self.text),
            prompt_tokens=sum(prompts) if prompts else None,
            completion_tokens=sum(completions) if completions else None,
            model=self.answered_by or self.model,
            tool_calls=self.tool_calls,
        )


class OpenAIEngine:
    name = "openai"
    accepts_steering = False

    def __init__(
        self,
        base_url: str | None,
        model: str,
        api_key: str | None,
        context_window: int,
        max_tool_rounds: int = 8,
        client_factory: ClientFactory = default_client,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.api_key = api_key
        self.context_window = context_window
        self.max_tool_rounds = max_tool_rounds
        self.client_factory = client_factory
        self._client: AsyncOpenAI | None = None  # made at the first turn, then shared

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult:
        if self._client is None:
            self._client = self.client_factory(self.base_url, self.api_key)
        turn = _Turn(self._client, request.model or self.model, request, io, self.max_tool_rounds)
        try:
            return await turn.run()
        except OpenAIError as exc:
            raise engine_error(exc, self.base_url or "api.openai.com") from exc

    async def aclose(self) -> None:
        """Close the shared client and its connections (at shutdown)."""
        client, self._client = self._client, None
        if client is not None:
            with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
                await client.close()
