"""Steered messages for the framework engines: folded into the model input between calls.

A framework rebuilds its model input before every model call from what the run has
said so far. A steered message is taken (`io.take_steer()`) only at such a call, so
the engine uses every message it takes and `EngineResult.steer_used` stays None;
a message that arrives after the run's last model call is never taken and runs as
the next turn. A message once taken stays in every later call of the turn, at the
place it arrived: after the items the run had when it was taken, before the ones
that came later. The input only grows during a run, so that place keeps its meaning;
should a framework shorten it (a handoff's input filter), the message goes last.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from broker.engines.base import TurnIO
from core.engine_types import ChatMessage

T = TypeVar("T")


class Steering(Generic[T]):
    """The steered messages of one run, each with the input length it arrived at."""

    def __init__(self, io: TurnIO, make: Callable[[ChatMessage], T]) -> None:
        self.io = io
        self.make = make
        self.placed: list[tuple[int, T]] = []

    def fold(self, items: list[T]) -> list[T]:
        """`items` (the framework's input for the next model call) with every steered
        message taken so far in its place, the ones arriving now last."""
        self.placed.extend((len(items), self.make(m)) for m in self.io.take_steer())
        if not self.placed:
            return items
        out = list(items)
        for shift, (at, item) in enumerate(self.placed):
            out.insert(at + shift, item)
        return out
