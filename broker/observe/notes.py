"""What a turn's spans need of its record, as plain values cheap to make and to pickle.

The daemon makes a `TurnFacts` tuple from each turn record it writes and ships
it to the trace exporter (trace_export.py); only the exporter turns it into
spans (tracing.py). Message text, tool arguments and results are in it only
when they are to be captured.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ledger.port.records import TurnRecord

Input = tuple[str, str | None]  # an input item's id, and its text when captured
Call = tuple[str, str, str, str]  # a tool call's id, name, and (captured) arguments, result


class TurnFacts(NamedTuple):
    turn_id: str
    session: str
    type: str
    status: str
    reason: str | None
    error: str | None
    engine: str
    model: str | None
    started_at: int
    completed_at: int
    prompt_tokens: int | None
    completion_tokens: int | None
    output: str
    inputs: list[Input]
    events: list[tuple[str, dict[str, Any]]]  # its `llm` events
    tool_calls: list[Call]


def facts(rec: TurnRecord, capture: bool) -> tuple[Any, ...]:
    """The record's facts as a plain tuple (a `TurnFacts` once `as_facts` reads it)."""
    return (
        rec.turn_id,
        rec.session,
        rec.type,
        rec.status,
        rec.reason,
        rec.error,
        rec.engine,
        rec.model,
        rec.started_at,
        rec.completed_at,
        rec.prompt_tokens,
        rec.completion_tokens,
        rec.output if capture else "",
        [(i.id, i.text if capture else None) for i in rec.inputs],
        [(kind, data) for kind, data in rec.events if kind == "llm"],
        [
            (c.id, c.name, c.arguments, c.result) if capture else (c.id, c.name, "", "")
            for c in rec.tool_calls
        ],
    )


def as_facts(values: tuple[Any, ...]) -> TurnFacts:
    return TurnFacts._make(values)
