"""broker/engines/steering.py: a steered message keeps its place in every later model
input of the run, and each is taken from the turn once."""

from __future__ import annotations

from typing import Any

from broker.engines.steering import Steering
from core.engine_types import ChatMessage


class Io:
    def __init__(self) -> None:
        self.waiting: list[ChatMessage] = []
        self.takes = 0

    async def delta(self, text: str) -> None: ...

    def take_steer(self) -> list[ChatMessage]:
        self.takes += 1
        taken, self.waiting = self.waiting, []
        return taken

    async def call_tool(
        self, name: str, arguments: dict[str, Any], call_id: str | None = None
    ) -> str:
        return ""

    def event(self, kind: str, data: dict[str, Any]) -> None: ...


def said(message: ChatMessage) -> str:
    return f"{message.name}: {message.content}" if message.name else message.content


def user(text: str, name: str | None = None) -> ChatMessage:
    return ChatMessage("user", text, name=name, item_id=f"i-{text}")


def test_a_steered_message_keeps_its_place_in_later_calls() -> None:
    io = Io()
    steering = Steering(io, said)
    assert steering.fold(["q"]) == ["q"]
    io.waiting = [user("also", "Ann")]
    assert steering.fold(["q", "call", "out"]) == ["q", "call", "out", "Ann: also"]
    # The run goes on: a second tool round, then another steer.
    io.waiting = [user("and")]
    grown = ["q", "call", "out", "call2", "out2"]
    assert steering.fold(grown) == ["q", "call", "out", "Ann: also", "call2", "out2", "and"]
    assert steering.fold([*grown, "x"]) == [
        *["q", "call", "out", "Ann: also", "call2", "out2", "and", "x"]
    ]
    assert io.takes == 4 and io.waiting == []


def test_an_input_the_framework_shortened_gets_the_message_last() -> None:
    io = Io()
    steering = Steering(io, said)
    io.waiting = [user("one"), user("two")]
    assert steering.fold(["a", "b", "c"]) == ["a", "b", "c", "one", "two"]
    assert steering.fold(["z"]) == ["z", "one", "two"]
