"""A `kind = "python"` engine (docs/engines.md): it answers in the daemon's own process.

    [engine]
    kind = "python"
    entry = "engine_python:make"   # this file, beside the config file or on sys.path
    greeting = "Hello"

It greets the sender, counts the turns it has seen in this session's history, and
calls the `scratchpad_merge` broker tool to keep a note. The blocking part (a stand-in
for a synchronous client) runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import time
from typing import Any

import anyio

from broker.engines import EngineError, EngineResult, TurnIO, TurnRequest


def slow_lookup(text: str) -> str:
    """A blocking call, as a synchronous SDK would make."""
    time.sleep(0.01)
    return text[::-1]


class Greeter:
    name = "greeter"
    accepts_steering = False
    context_window = 8192

    def __init__(self, config: dict[str, Any]) -> None:
        self.greeting = str(config.get("greeting", "Hello"))

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult:
        said = " ".join(m.content for m in request.inputs).strip()
        if not said:
            raise EngineError("I got an empty message.")
        who = request.inputs[-1].name or "there"
        earlier = sum(1 for m in request.history if m.role == "assistant")
        backwards = await anyio.to_thread.run_sync(slow_lookup, said)
        await io.delta(f"{self.greeting}, {who}! ")
        await io.call_tool("scratchpad_merge", {"patch": {"last_said": said[:200]}})
        text = f"{self.greeting}, {who}! Turn {earlier + 1}; backwards: {backwards}"
        await io.delta(text[len(f"{self.greeting}, {who}! ") :])
        return EngineResult(text=text, model="greeter")

    async def aclose(self) -> None:
        return None


def make(config: dict[str, Any]) -> Greeter:
    return Greeter(config)
