"""The turns running on this node, for the workflow's news to reach them at once.

The workflow pushes its news for a running turn (a steer, an abort, a chat command)
through a local activity (`push_control`), which runs on the workflow's node; with
eager activity dispatch a turn's activity runs on the node whose workflow task
scheduled it, so the push finds the turn here and wakes it, and nothing is polled
while no news is pending. A push that finds no such turn here is lost, and harmless:
the turn asks the workflow itself every `QUERY_EVERY_S` (the `control` query). A push
carries the whole control state of the turn, not a change, so the latest replaces the
earlier ones and nothing is applied twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio

from broker.runtime.temporal.control import Control

QUERY_EVERY_S = 2.0  # the bound on news that missed this node


@dataclass
class LiveTurn:
    turn_no: int
    wake: anyio.Event = field(default_factory=anyio.Event)
    pushed: Control | None = None
    latest: Control | None = None  # the last pushed, kept for the abort's reason

    def take(self) -> Control | None:
        """The news pushed since the last take, if any; the next wait starts afresh."""
        self.wake = anyio.Event()
        pushed, self.pushed = self.pushed, None
        return pushed


class LiveTurns:
    def __init__(self) -> None:
        self._turns: dict[str, LiveTurn] = {}

    @contextmanager
    def running(self, label: str, turn_no: int) -> Iterator[LiveTurn]:
        turn = self._turns[label] = LiveTurn(turn_no)
        try:
            yield turn
        finally:
            if self._turns.get(label) is turn:
                del self._turns[label]

    def push(self, label: str, turn_no: int, control: Control) -> bool:
        """True when the turn runs here and was woken."""
        turn = self._turns.get(label)
        if turn is None or turn.turn_no != turn_no:
            return False
        turn.pushed = turn.latest = control
        turn.wake.set()
        return True
