"""A turn's events while it runs: which the broker records, and when they are written. Pure.

Events get their sequence number when they happen, one counter per turn across every
type, so the order is the order they happened, whichever write carries them to the
ledger.

Group commit per turn: a turn has at most one write of events on its way to the
ledger at a time. An event that comes while none is on its way is sent at once;
events that come meanwhile wait and leave together when it has committed (or when
`MAX_WAITING` of them wait), and the ledger's writer puts many turns' writes into one
transaction. The events made as the turn begins (its `intent`) and ends (its last
`llm`, its `error`) are not sent on their own: the intent goes with the next event or
with the commit, and the last ones with the commit, in its transaction, so a turn that
reports nothing while it runs costs no write of its own for its events
(docs/performance.md). Its intent, built from its inputs, which are durable before it
begins, is rebuilt by crash recovery if a crash comes first.

Totals count what happened: model calls are `llm` events (a deterministic compaction
fallback records none), files modified are distinct paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from core.snapshots import normal_path, path_problem

MAX_WAITING = 64  # events that wait for the write before them
MODIFYING_OPS = ("write", "edit", "create", "delete")

Event = tuple[str, dict[str, Any]]


@dataclass(slots=True)
class EventLog:
    """A running turn's events, numbered as they happen: `events[:sent]` are on their way to the
    ledger or in it; `in_flight` while a write of them is uncommitted."""

    events: list[Event]
    sent: int = 0
    in_flight: bool = False
    closed: bool = False  # the turn's record is built: nothing more is sent alone
    engine_calls: int = 0  # `llm` events the engine reported (not the broker's own)

    @property
    def waiting(self) -> int:
        return len(self.events) - self.sent

    def add(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, data))
        if kind == "llm" and data.get("by") != "broker":
            self.engine_calls += 1


def flush_due(log: EventLog) -> bool:
    """Should the waiting events be sent now (none on its way, or too many waiting)?"""
    if log.closed or log.waiting == 0:
        return False
    return not log.in_flight or log.waiting >= MAX_WAITING


def intent_payload(inputs: Sequence[tuple[str | None, str | None, str]]) -> dict[str, Any]:
    """The broker's `intent`: the turn's inputs as (msg_id, sender, text), the text cut
    to 500 characters (the messages themselves are stored whole with the turn)."""
    return {
        "by": "broker",
        "inputs": [
            {"msg_id": msg_id, "sender": sender, "text": text[:500]}
            for msg_id, sender, text in inputs
        ],
    }


def llm_payload(
    model: str | None,
    prompt_tokens: int | None,
    completion_tokens: int | None,
    duration_ms: int,
    stop_reason: str,
) -> dict[str, Any]:
    """One model call as the broker saw it."""
    return {
        "by": "broker",
        "model": model,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "duration_ms": duration_ms,
        "stop_reason": stop_reason,
    }


def action_payload(
    tool: str, status: str, duration_ms: int, error: str | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "by": "broker",
        "tool": tool,
        "status": status,
        "duration_ms": duration_ms,
    }
    if error is not None:
        out["error"] = error[:500]
    return out


def stop_reason(status: str, reason: str | None) -> str:
    """An engine call's stop reason from how it ended."""
    if status == "completed":
        return "end_turn"
    return reason or status


def model_calls(events: Iterable[Event]) -> int:
    """The turn's model calls: its `llm` events (a compaction fallback makes none)."""
    return sum(1 for kind, _ in events if kind == "llm")


def modified_paths(events: Iterable[Event]) -> set[str]:
    """The paths a turn's `file` events modified, normalized; a path the
    ledger cannot record is left out."""
    out: set[str] = set()
    for kind, payload in events:
        if kind == "file" and payload.get("op") in MODIFYING_OPS:
            path = payload.get("path")
            if isinstance(path, str) and path_problem(path) is None:
                out.add(normal_path(path))
    return out
