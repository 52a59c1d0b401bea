"""Where the daemon's hooks report what happened, for metrics and traces to take.

The hooks in the ingress, the writer, the running turn and the turn commit call
`hub.observer`, a process-wide `Observer`: by default one that does nothing, so
a daemon with metrics and tracing off pays a method call per hook and no more.
The daemon installs the observers its configuration asks for at start and
puts the silent one back when it stops. An observer never blocks, never raises
into the hook that called it, and keeps nothing that grows without bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ledger.port.records import TurnRecord
from plumbing import logs

log = logs.get("broker.observe")
InboundOutcome = Literal["acked", "duplicate", "refused"]
ErasureState = Literal["started", "finished"]


class Observer:
    """What the hooks report; each method does nothing here."""

    def inbound(self, outcome: InboundOutcome) -> None:
        """An inbound frame was answered."""

    def acked(self, filed_at: float, acked_at: float, session: str, item: str) -> None:
        """A message was acked: filed with the writer at `filed_at`, acked at `acked_at`
        (the event loop's clock, in seconds)."""

    def batch(self, jobs: int, seconds: float) -> None:
        """The writer had a batch of `jobs` committed, `seconds` after handing it over."""

    def first_chunk(self, seconds: float) -> None:
        """An engine call's first delta came `seconds` after the call began."""

    def delta(self, session: str, turn: str, text: str) -> None:
        """A chunk of a running turn's reply, as it streams."""

    def engine_call(self, turn: str, began_ms: int, ended_ms: int) -> None:
        """A turn's engine call ran from `began_ms` to `ended_ms` (wall clock)."""

    def tool_call(self, turn: str, name: str, began_ms: int, ended_ms: int, status: str) -> None:
        """A turn's broker tool call."""

    def turn(self, rec: TurnRecord, written: str) -> None:
        """A turn's record was written (`thread`, `orphan`) or not (`lost`)."""

    def expiry(self, expired_turns: int) -> None:
        """An expiry run ended, having made stubs of `expired_turns` turns."""

    def erasure(self, state: ErasureState, counts: Mapping[str, int]) -> None:
        """An erasure was `started` (marked) or `finished` (`counts`: what it removed)."""


class Fanout(Observer):
    """Several observers as one; one that raises is logged and the others still hear.
    A hook is passed only to the observers that listen to it (that override it), so a
    hook none of them listens to, such as a turn's every delta with only metrics on,
    costs one call."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = tuple(observers)

        def listening(hook: str) -> tuple[Any, ...]:
            return tuple(
                getattr(o, hook)
                for o in self.observers
                if getattr(type(o), hook) is not getattr(Observer, hook)
            )

        self._inbound = listening("inbound")
        self._acked = listening("acked")
        self._batch = listening("batch")
        self._first_chunk = listening("first_chunk")
        self._delta = listening("delta")
        self._engine_call = listening("engine_call")
        self._tool_call = listening("tool_call")
        self._turn = listening("turn")

    def inbound(self, outcome: InboundOutcome) -> None:
        for hook in self._inbound:
            _safely(hook, outcome)

    def acked(self, filed_at: float, acked_at: float, session: str, item: str) -> None:
        for hook in self._acked:
            _safely(hook, filed_at, acked_at, session, item)

    def batch(self, jobs: int, seconds: float) -> None:
        for hook in self._batch:
            _safely(hook, jobs, seconds)

    def first_chunk(self, seconds: float) -> None:
        for hook in self._first_chunk:
            _safely(hook, seconds)

    def delta(self, session: str, turn: str, text: str) -> None:
        for hook in self._delta:
            _safely(hook, session, turn, text)

    def engine_call(self, turn: str, began_ms: int, ended_ms: int) -> None:
        for hook in self._engine_call:
            _safely(hook, turn, began_ms, ended_ms)

    def tool_call(self, turn: str, name: str, began_ms: int, ended_ms: int, status: str) -> None:
        for hook in self._tool_call:
            _safely(hook, turn, name, began_ms, ended_ms, status)

    def turn(self, rec: TurnRecord, written: str) -> None:
        for hook in self._turn:
            _safely(hook, rec, written)

    def expiry(self, expired_turns: int) -> None:
        for o in self.observers:
            _safely(o.expiry, expired_turns)

    def erasure(self, state: ErasureState, counts: Mapping[str, int]) -> None:
        for o in self.observers:
            _safely(o.erasure, state, counts)


def _safely(fn: object, *args: object) -> None:
    try:
        fn(*args)  # type: ignore[operator]
    except Exception:
        log.exception("an observer failed; the broker goes on without its figure")


SILENT = Observer()
observer: Observer = SILENT


def install(observers: Sequence[Observer]) -> None:
    """Make these the observers every hook reports to (none: the silent one)."""
    global observer
    observer = Fanout(observers) if observers else SILENT
