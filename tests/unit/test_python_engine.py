"""The engine authors' API (`broker.engines`) and the python engine's wrapper, in process.

An engine written against exactly the documented names type-checks as an `Engine`
and runs through `PythonEngine` on asyncio and trio: its deltas and tool calls reach
the TurnIO, an `EngineError` it raises passes through unchanged, and a result that is
not an `EngineResult` fails the turn with a sentence. Loading refuses what cannot be
an engine with a `ConfigError` naming the key.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from broker.config import ConfigError, EngineSettings
from broker.engines import ChatMessage, Engine, EngineError, EngineResult, TurnIO, TurnRequest
from broker.engines.python_engine import PythonEngine, check_entry, is_engine, load_python_engine

pytestmark = pytest.mark.anyio


class Shout:
    """An engine as an author writes it, from the stable names alone."""

    name = "shout"
    accepts_steering = True
    context_window = 4096

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.suffix = str((config or {}).get("suffix", "!"))

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult:
        said = " ".join(m.content for m in request.inputs)
        if said == "refuse":
            raise EngineError("no, thank you", reason="engine")
        if said == "wrong":
            return "a string"  # type: ignore[return-value]
        found = await io.call_tool("scratchpad_get", {}, "c1")
        await anyio.lowlevel.checkpoint()
        steered: list[ChatMessage] = io.take_steer()
        text = said.upper() + self.suffix + "".join(" " + m.content for m in steered)
        await io.delta(text)
        return EngineResult(text=text + f" ({found})", model="shout")

    async def aclose(self) -> None:
        return None


class FakeIO:
    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.calls: list[tuple[str, dict[str, Any], str | None]] = []
        self.steer = [ChatMessage("user", "and more")]

    async def delta(self, text: str) -> None:
        self.deltas.append(text)

    def take_steer(self) -> list[ChatMessage]:
        taken, self.steer = self.steer, []
        return taken

    async def call_tool(
        self, name: str, arguments: dict[str, Any], call_id: str | None = None
    ) -> str:
        self.calls.append((name, arguments, call_id))
        return "{}"

    def event(self, kind: str, data: dict[str, Any]) -> None:
        return None


def request(text: str) -> TurnRequest:
    return TurnRequest("s-1", "t-1", None, (), (ChatMessage("user", text),))


def test_an_author_engine_is_an_engine() -> None:
    engine: Engine = Shout()  # mypy checks the Protocol here
    assert is_engine(engine) and not is_engine(Shout) and not is_engine(42)


async def test_the_wrapper_runs_an_author_engine() -> None:
    engine = PythonEngine(Shout({"suffix": "?"}), "mod:engine", 8192)
    assert (engine.name, engine.accepts_steering, engine.context_window) == ("shout", True, 4096)
    io = FakeIO()
    result = await engine.run(request("hi"), io)
    assert io.deltas == ["HI? and more"]
    assert result.text == "HI? and more ({})"
    assert io.calls == [("scratchpad_get", {}, "c1")]


async def test_an_engine_error_passes_through_and_a_wrong_result_fails_with_a_sentence() -> None:
    engine = PythonEngine(Shout(), "mod:engine", 8192)
    with pytest.raises(EngineError, match="no, thank you"):
        await engine.run(request("refuse"), FakeIO())
    with pytest.raises(EngineError, match="returned a str, not an EngineResult"):
        await engine.run(request("wrong"), FakeIO())


async def test_cancelling_the_turn_stops_the_engine() -> None:
    class Hangs(Shout):
        async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult:
            await anyio.sleep_forever()
            raise AssertionError("not reached")

    engine = PythonEngine(Hangs(), "mod:engine", 8192)
    with anyio.move_on_after(0.05) as scope:
        await engine.run(request("hi"), FakeIO())
    assert scope.cancelled_caught


def test_what_is_not_an_engine_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"engine\.entry = 'm:x' is a int, neither an engine"):
        check_entry(42, "engine.entry", "m:x")
    check_entry(Shout, "engine.entry", "m:Shout")  # a class is a factory
    with pytest.raises(ConfigError, match=r"engine\.entry = 'json' is not of the form"):
        load_python_engine(EngineSettings(kind="python", entry="json"))
    with pytest.raises(ConfigError, match="the factory returned a dict"):
        load_python_engine(EngineSettings(kind="python", entry="builtins:dict"))
