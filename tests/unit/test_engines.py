"""The engines: echo, subprocess (JSON lines) and OpenAI (against a local fake API)."""

from __future__ import annotations

import gc
import json
import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ByteReceiveStream
from openai import AsyncOpenAI

from broker.engines.base import Engine, EngineError
from broker.engines.echo import EchoEngine, split_chunks
from broker.engines.fake_openai import (
    FakeOpenAI,
    Reply,
    error_reply,
    stream_error_reply,
    text_reply,
    tool_call_reply,
)
from broker.engines.openai_engine import OpenAIEngine, SSEDecoder
from broker.engines.subprocess_engine import SubprocessEngine
from broker.engines.subprocess_protocol import LineReader
from core.engine_types import ChatMessage, EngineResult, ToolSpec, TurnRequest
from tests.suspensions import counting_suspensions

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
ECHO_COMMAND = [sys.executable, str(ROOT / "examples" / "engine_echo.py")]
WAIT_S = 10


class FakeIO:
    """Records deltas, offers steered messages, answers tool calls."""

    def __init__(
        self,
        steer: tuple[ChatMessage, ...] = (),
        steer_after: int = 0,
        tools: dict[str, Callable[[dict[str, Any]], str]] | None = None,
    ) -> None:
        self.deltas: list[str] = []
        self.steer = list(steer)
        self.steer_after = steer_after  # offer the steered messages after this many deltas
        self.steer_polls = 0
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.tools = tools or {}
        self.tool_calls: list[tuple[str, dict[str, Any]]] = []
        self.got_delta = anyio.Event()

    async def delta(self, text: str) -> None:
        self.deltas.append(text)
        self.got_delta.set()
        await anyio.lowlevel.checkpoint()  # as a real adapter stream would

    def take_steer(self) -> list[ChatMessage]:
        self.steer_polls += 1
        if len(self.deltas) < self.steer_after:
            return []
        taken, self.steer = self.steer, []
        return taken

    async def call_tool(
        self, name: str, arguments: dict[str, Any], call_id: str | None = None
    ) -> str:
        self.tool_calls.append((name, arguments))
        if name not in self.tools:
            raise EngineError(f"There is no tool named {name!r}.")
        return self.tools[name](arguments)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, data))


def make_request(*texts: str, **extra: Any) -> TurnRequest:
    inputs = tuple(
        ChatMessage("user", text, name="Ann Lee", msg_id=f"m{i}") for i, text in enumerate(texts)
    )
    fields: dict[str, Any] = {"system_prompt": None, "history": ()}
    fields.update(extra)
    return TurnRequest(session="s1", turn_id="t1", inputs=inputs, **fields)


async def run(engine: Engine, request: TurnRequest, io: FakeIO) -> EngineResult:
    try:
        with anyio.fail_after(WAIT_S):
            return await engine.run(request, io)
    finally:
        if isinstance(engine, OpenAIEngine):
            await engine.aclose()


async def run_until_first_delta(engine: Engine, request: TurnRequest, io: FakeIO) -> float:
    """Start a turn, abort it at its first delta; the seconds the abort took."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(run, engine, request, io)
        with anyio.fail_after(WAIT_S):
            await io.got_delta.wait()
        start = anyio.current_time()
        tg.cancel_scope.cancel()
    return anyio.current_time() - start


# -- echo ---------------------------------------------------------------------------


async def test_echo_replies_in_chunks() -> None:
    io = FakeIO()
    result = await run(EchoEngine(chunks=3), make_request("hello world", "again"), io)
    assert result.text == "hello world\nagain"
    assert len(io.deltas) == 3
    assert "".join(io.deltas) == result.text
    assert (result.prompt_tokens, result.completion_tokens, result.model) == (3, 3, "echo")


async def test_echo_split_chunks() -> None:
    assert split_chunks("", 3) == []
    assert split_chunks("abcdefg", 3) == ["abc", "def", "g"]
    assert split_chunks("ab", 5) == ["a", "b"]
    assert split_chunks("abc", 0) == ["abc"]


async def test_echo_steering_joins_the_reply() -> None:
    io = FakeIO(steer=(ChatMessage("user", "also this", msg_id="m9"),), steer_after=1)
    result = await run(EchoEngine(chunks=2), make_request("first"), io)
    assert result.text == "first\nalso this"
    assert io.deltas[-1] == "\nalso this"


class InstantIO(FakeIO):
    """Deltas that go out without waiting, as RunningTurn's do (it only posts them)."""

    async def delta(self, text: str) -> None:
        self.deltas.append(text)


@pytest.mark.parametrize(("chunks", "suspensions"), [(1, 0), (3, 2)])
async def test_echo_at_zero_delay_yields_between_chunks_only(chunks: int, suspensions: int) -> None:
    """Steering and aborts need a chance to arrive between chunks; after the last one
    nothing does, and an extra trip through the event loop cost every turn."""
    io, counter = InstantIO(), [0]
    result = await counting_suspensions(
        EchoEngine(chunks=chunks).run(make_request("abcdef"), io), counter
    )
    assert result.text == "abcdef" and len(io.deltas) == chunks
    assert counter == [suspensions]


async def test_echo_abort_keeps_partial_deltas() -> None:
    io = FakeIO()
    engine = EchoEngine(chunks=4, delay_ms=2000)
    took = await run_until_first_delta(engine, make_request("abcdefgh"), io)
    assert io.deltas == ["ab"]
    assert took < 1


# -- subprocess: the example engine -------------------------------------------------


async def test_subprocess_example_replies_word_by_word() -> None:
    io = FakeIO()
    engine = SubprocessEngine(ECHO_COMMAND, context_window=8192)
    result = await run(engine, make_request("hello big world"), io)
    assert io.deltas == ["HELLO ", "BIG ", "WORLD"]
    assert result.text == "HELLO BIG WORLD"
    assert (result.prompt_tokens, result.completion_tokens) == (3, 3)
    assert result.model == "engine-echo"
    assert result.tool_calls == []


async def test_subprocess_example_takes_steering() -> None:
    io = FakeIO(steer=(ChatMessage("user", "and more", name="Bo", msg_id="m7"),))
    engine = SubprocessEngine([*ECHO_COMMAND, "--delay", "0.05"], context_window=8192)
    result = await run(engine, make_request("one two three"), io)
    assert result.text == "ONE TWO THREE\nAND MORE"
    assert "".join(io.deltas) == result.text


async def test_subprocess_without_steering_never_polls() -> None:
    io = FakeIO(steer=(ChatMessage("user", "ignored", msg_id="m7"),))
    engine = SubprocessEngine(ECHO_COMMAND, context_window=8192, accepts_steering=False)
    result = await run(engine, make_request("just this"), io)
    assert result.text == "JUST THIS"
    assert io.steer_polls == 0


# -- subprocess: inline programs ----------------------------------------------------

PRELUDE = """\
import json, os, signal, sys, time
def send(**message):
    print(json.dumps(message), flush=True)
turn = json.loads(sys.stdin.readline())
"""


@pytest.fixture
def script(tmp_path: Path) -> Callable[[str], list[str]]:
    """Write an engine program (after a prelude that reads the turn); its command."""

    def write(body: str) -> list[str]:
        path = tmp_path / "engine.py"
        path.write_text(PRELUDE + textwrap.dedent(body))
        return [sys.executable, str(path)]

    return write


async def test_subprocess_sends_the_turn(script: Callable[[str], list[str]]) -> None:
    command = script('send(type="final", text=json.dumps(turn))')
    request = make_request(
        "hi",
        system_prompt="Be brief.",
        history=(ChatMessage("assistant", "earlier"),),
        notes=("2 messages were dropped",),
        tools=(ToolSpec("add", "Add numbers.", {"type": "object"}),),
        model="m-1",
    )
    result = await run(SubprocessEngine(command, 8192), request, FakeIO())
    assert json.loads(result.text) == {
        "type": "turn",
        "session": "s1",
        "turn": "t1",
        "system": "Be brief.",
        "history": [{"role": "assistant", "content": "earlier"}],
        "inputs": [{"role": "user", "content": "hi", "name": "Ann Lee", "msg_id": "m0"}],
        "notes": ["2 messages were dropped"],
        "tools": [{"name": "add", "description": "Add numbers.", "parameters": {"type": "object"}}],
        "model": "m-1",
    }


async def test_subprocess_tool_round_trip(script: Callable[[str], list[str]]) -> None:
    command = script("""
        send(type="tool_call", id="c1", name="add", arguments={"a": 2, "b": 3})
        first = json.loads(sys.stdin.readline())
        send(type="delta", text=f"{first['id']}={first['content']}/{first['status']}")
        send(type="tool_call", id="c2", name="nope", arguments={})
        second = json.loads(sys.stdin.readline())
        send(type="delta", text=f" {second['id']}/{second['status']}: {second['content']}")
        send(type="final", usage={"prompt_tokens": 4, "completion_tokens": 2}, model="tooly")
    """)
    io = FakeIO(tools={"add": lambda args: str(args["a"] + args["b"])})
    result = await run(SubprocessEngine(command, 8192), make_request("sum"), io)
    assert io.tool_calls == [("add", {"a": 2, "b": 3}), ("nope", {})]
    assert result.text == "c1=5/ok c2/error: There is no tool named 'nope'."
    assert (result.prompt_tokens, result.completion_tokens, result.model) == (4, 2, "tooly")
    assert [(c.id, c.name, c.status, c.result) for c in result.tool_calls] == [
        ("c1", "add", "ok", "5"),
        ("c2", "nope", "error", "There is no tool named 'nope'."),
    ]
    assert json.loads(result.tool_calls[0].arguments) == {"a": 2, "b": 3}


async def test_subprocess_error_line(script: Callable[[str], list[str]]) -> None:
    command = script('send(type="delta", text="hm"); send(type="error", message="Model on fire.")')
    with pytest.raises(EngineError, match=r"^Model on fire\.$"):
        await run(SubprocessEngine(command, 8192), make_request("x"), FakeIO())


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('sys.stderr.write("first\\nboom happened\\n"); sys.exit(3)', "exit status 3.*boom"),
        ('raise ValueError("bad input")', "exit status 1.*ValueError: bad input"),
        ('send(type="delta", text="partial")', "before its final reply \\(exit status 0\\)"),
        ('send(type="final", text="ok"); sys.exit(4)', "after its final reply \\(exit status 4"),
        ("os.kill(os.getpid(), signal.SIGKILL)", "killed by signal SIGKILL"),
        ('print("hello, I am not JSON", flush=True); time.sleep(30)', "not a JSON object"),
        ('print("[1, 2]", flush=True)', "not a JSON object"),
        ('send(type="delta", text=7)', "'text' is malformed"),
    ],
)
async def test_subprocess_failures(
    script: Callable[[str], list[str]], body: str, expected: str
) -> None:
    engine = SubprocessEngine(script(body), 8192)
    with pytest.raises(EngineError, match=expected) as caught:
        await run(engine, make_request("x"), FakeIO())
    assert caught.value.reason == "engine"


async def test_subprocess_final_without_text_joins_deltas(
    script: Callable[[str], list[str]],
) -> None:
    command = script(
        'send(type="delta", text="a"); send(type="delta", text="b"); send(type="final")'
    )
    result = await run(SubprocessEngine(command, 8192), make_request("x"), FakeIO())
    assert result.text == "ab"
    assert (result.prompt_tokens, result.completion_tokens, result.model) == (None, None, None)


async def test_subprocess_missing_program() -> None:
    engine = SubprocessEngine(["/nonexistent/engine-program"], 8192)
    with pytest.raises(EngineError, match="Cannot start the engine program"):
        await run(engine, make_request("x"), FakeIO())
    with pytest.raises(EngineError, match="No engine command"):
        await run(SubprocessEngine([], 8192), make_request("x"), FakeIO())


def assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize("ignore_term", [False, True])
async def test_subprocess_abort_kills_the_program(
    script: Callable[[str], list[str]], ignore_term: bool
) -> None:
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else ""
    command = script(ignore + 'send(type="delta", text=str(os.getpid())); time.sleep(30)')
    io = FakeIO()
    took = await run_until_first_delta(
        SubprocessEngine(command, 8192, grace_s=0.3), make_request("x"), io
    )
    assert_gone(int(io.deltas[0]))
    assert took < 2


def is_dead(pid: int) -> bool:
    """Gone, or a zombie waiting for a parent (init, for orphans) to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # reaped between open and read: ESRCH
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


async def test_subprocess_abort_kills_the_programs_children(
    script: Callable[[str], list[str]],
) -> None:
    command = script("""
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        send(type="delta", text=str(child.pid))
        time.sleep(30)
    """)
    io = FakeIO()
    await run_until_first_delta(SubprocessEngine(command, 8192), make_request("x"), io)
    child = int(io.deltas[0])
    for _ in range(WAIT_S * 100):
        if is_dead(child):
            break
        await anyio.sleep(0.01)
    assert is_dead(child)


async def test_subprocess_env_is_added(script: Callable[[str], list[str]]) -> None:
    command = script('send(type="final", text=os.environ["ENGINE_TEST"] + os.environ["PATH"][:1])')
    engine = SubprocessEngine(command, 8192, env={"ENGINE_TEST": "yes"})
    result = await run(engine, make_request("x"), FakeIO())
    assert result.text == "yes" + os.environ["PATH"][:1]


class _Bytes(ByteReceiveStream):
    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.lowlevel.checkpoint()
        if not self.chunks:
            raise anyio.EndOfStream
        return self.chunks.pop(0)

    async def aclose(self) -> None:
        self.chunks.clear()


async def test_line_reader_bounds_lines() -> None:
    reader = LineReader(_Bytes(b'{"a"', b": 1}\n\nlast"), limit=64)
    assert [await reader.readline() for _ in range(4)] == [b'{"a": 1}', b"", b"last", None]
    long = LineReader(_Bytes(b"x" * 40, b"y" * 40), limit=64)
    with pytest.raises(EngineError, match="longer than"):
        await long.readline()


# -- openai -------------------------------------------------------------------------


@pytest.fixture
def api() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def openai_engine(api: FakeOpenAI, **extra: Any) -> OpenAIEngine:
    return OpenAIEngine(api.base_url, "test-model", "sk-test", 8192, **extra)


async def test_openai_streams_text(api: FakeOpenAI) -> None:
    api.script(text_reply(["Hel", "lo ", "there"], usage=(11, 3)))
    io = FakeIO()
    request = make_request(
        "hi",
        system_prompt="Be brief.",
        history=(ChatMessage("user", "before"), ChatMessage("assistant", "ok")),
        notes=("1 message was dropped",),
    )
    result = await run(openai_engine(api), request, io)
    assert io.deltas == ["Hel", "lo ", "there"]
    assert result.text == "Hello there"
    assert (result.prompt_tokens, result.completion_tokens) == (11, 3)
    assert result.model == "fake-model"
    [sent] = api.requests
    assert api.paths == ["/v1/chat/completions"]
    assert sent["model"] == "test-model"
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert "tools" not in sent
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "before"},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": "Notes from the broker:\n- 1 message was dropped"},
        {"role": "user", "content": "hi", "name": "Ann_Lee"},
    ]


async def test_openai_tool_round_trip(api: FakeOpenAI) -> None:
    api.script(
        tool_call_reply([("call_1", "add", '{"a": 2, "b": 3}'), ("call_2", "nope", "{}")]),
        text_reply(["It is ", "5."]),
    )
    io = FakeIO(tools={"add": lambda args: str(args["a"] + args["b"])})
    add = ToolSpec("add", "Add two numbers.", {"type": "object", "properties": {}})
    result = await run(openai_engine(api), make_request("2+3?", tools=(add,)), io)
    assert io.tool_calls == [("add", {"a": 2, "b": 3}), ("nope", {})]
    assert result.text == "It is 5."
    assert (result.prompt_tokens, result.completion_tokens) == (30, 12)
    # Each round is a model call of its own, reported as it ends.
    calls = [
        (k, d["model"], d["prompt_tokens"], d["completion_tokens"], d["stop_reason"], d["round"])
        for k, d in io.events
    ]
    assert calls == [
        ("llm", "fake-model", 20, 7, "tool_calls", 1),
        ("llm", "fake-model", 10, 5, "stop", 2),
    ]
    assert all(isinstance(d["duration_ms"], int) and d["duration_ms"] >= 0 for _, d in io.events)
    assert [(c.id, c.name, c.arguments, c.result, c.status) for c in result.tool_calls] == [
        ("call_1", "add", '{"a": 2, "b": 3}', "5", "ok"),
        ("call_2", "nope", "{}", "There is no tool named 'nope'.", "error"),
    ]
    first, second = api.requests
    assert first["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two numbers.",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    assert "tool_choice" not in first
    assert second["messages"][-3:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "nope", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
        {"role": "tool", "tool_call_id": "call_2", "content": "There is no tool named 'nope'."},
    ]


async def test_openai_bad_tool_arguments_go_back_to_the_model(api: FakeOpenAI) -> None:
    api.script(tool_call_reply([("c", "add", "{not json")]), text_reply(["sorry"]))
    io = FakeIO(tools={"add": lambda args: "never"})
    result = await run(openai_engine(api), make_request("x"), io)
    assert io.tool_calls == []
    assert result.tool_calls[0].status == "error"
    assert (
        api.requests[1]["messages"][-1]["content"]
        == "The arguments for 'add' are not a JSON object."
    )


async def test_openai_text_before_tools_is_kept(api: FakeOpenAI) -> None:
    calls = tool_call_reply([("c", "add", "{}")])
    calls.chunks.insert(1, text_reply(["Let me add."]).chunks[1])
    api.script(calls, text_reply(["Done."]))
    io = FakeIO(tools={"add": lambda args: "0"})
    result = await run(openai_engine(api), make_request("x"), io)
    assert result.text == "Let me add.\n\nDone."
    assert api.requests[1]["messages"][-2]["content"] == "Let me add."


async def test_openai_stops_after_max_tool_rounds(api: FakeOpenAI) -> None:
    api.script(tool_call_reply([("c1", "add", "{}")]), tool_call_reply([("c2", "add", "{}")]))
    io = FakeIO(tools={"add": lambda args: "0"})
    tools = (ToolSpec("add", "Add.", {"type": "object"}),)
    with pytest.raises(EngineError, match="kept calling tools after 1 rounds"):
        await run(openai_engine(api, max_tool_rounds=1), make_request("x", tools=tools), io)
    assert len(io.tool_calls) == 1
    assert api.requests[1]["tool_choice"] == "none"


@pytest.mark.parametrize(
    ("reply", "expected", "reason"),
    [
        (
            error_reply(400, "Too many tokens.", code="context_length_exceeded"),
            "too long for the model's context window: Too many tokens",
            "context_overflow",
        ),
        (
            error_reply(400, "This model's maximum context length is 4096 tokens."),
            "context window: This model's maximum context length is 4096 tokens",
            "context_overflow",
        ),
        (error_reply(400, "Unknown parameter."), "HTTP 400: Unknown parameter", "engine"),
        (
            error_reply(500, "The server had an error."),
            "HTTP 500: The server had an error",
            "engine",
        ),
        (stream_error_reply(["pa"], "Upstream broke."), "failed: Upstream broke", "engine"),
        (Reply(chunks=[{"choices": "nonsense"}]), "", "ok"),
    ],
)
async def test_openai_errors(api: FakeOpenAI, reply: Reply, expected: str, reason: str) -> None:
    api.script(reply)
    engine = openai_engine(api)
    if reason == "ok":  # a malformed chunk is skipped, not fatal
        assert (await run(engine, make_request("x"), FakeIO())).text == ""
        return
    with pytest.raises(EngineError, match=expected) as caught:
        await run(engine, make_request("x"), FakeIO())
    assert caught.value.reason == reason
    assert len(api.requests) == 1  # errors marked not retryable are not retried


async def test_openai_unreachable_server() -> None:
    with FakeOpenAI() as closed:
        url = closed.base_url

    def factory(base_url: str | None, api_key: str | None) -> AsyncOpenAI:
        return AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)

    engine = OpenAIEngine(url, "m", "sk-test", 8192, client_factory=factory)
    with pytest.raises(EngineError, match=r"Cannot reach the model API at http://127\.0\.0\.1"):
        await run(engine, make_request("x"), FakeIO())


@pytest.mark.filterwarnings("ignore:Async generator 'httpcore2:ResourceWarning")
async def test_openai_abort_is_not_swallowed(api: FakeOpenAI) -> None:
    # Under trio, httpx2 abandons one async generator when a stream is closed
    # early; trio finalizes it but warns. Collected here, inside this test.
    reply = text_reply(["one ", "two"])
    reply.chunks = reply.chunks[:3]
    reply.stall = True
    api.script(reply)
    io = FakeIO()
    took = await run_until_first_delta(openai_engine(api), make_request("x"), io)
    assert io.deltas[0] == "one "
    assert took < 2
    gc.collect()
    await anyio.sleep(0.01)


async def test_openai_client_is_made_once(api: FakeOpenAI) -> None:
    made: list[str | None] = []

    def factory(base_url: str | None, api_key: str | None) -> AsyncOpenAI:
        made.append(api_key)
        return AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)

    api.script(text_reply(["one"]), text_reply(["two"]))
    engine = OpenAIEngine(api.base_url, "m", "sk-1", 8192, client_factory=factory)
    try:
        with anyio.fail_after(WAIT_S):
            first = await engine.run(make_request("a"), FakeIO())
            second = await engine.run(make_request("b", model="other"), FakeIO())
    finally:
        await engine.aclose()
    assert (first.text, second.text, made) == ("one", "two", ["sk-1"])
    assert [r["model"] for r in api.requests] == ["m", "other"]


async def test_openai_does_not_take_steering() -> None:
    assert OpenAIEngine(None, "m", "k", 8192).accepts_steering is False


async def test_sse_decoder() -> None:
    decoder = SSEDecoder(limit=64)
    assert decoder.feed(b': comment\r\ndata: {"a"') == []
    assert decoder.feed(b":1}\r\n\r\nevent: x\ndata: one\ndata: two\n\ndata: [DONE]") == [
        '{"a":1}',
        "one\ntwo",
    ]
    assert decoder.finish() == ["[DONE]"]
    with pytest.raises(EngineError, match="larger than"):
        decoder.feed(b"x" * 100)
