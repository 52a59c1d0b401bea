"""What one call of the `conversation_recall` tool reads (broker/recall_tool.py).

The tool checks its arguments into a `Request`; `answer` (which `Ledger.recall`
runs on a reader) does the reads it asks for and returns what they found, for
the tool to shape into text. The searches themselves are `ledger/recall.py`, the
other reads `ledger/recall_reads.py`.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from . import recall, recall_reads, recall_thread
from .recall_scope import entity_sessions


@dataclass(frozen=True, slots=True)
class Request:
    """One call of the recall tool, its arguments checked."""

    action: str
    session: str | None  # None: all sessions (search only)
    limit: int
    query: str | None = None
    roles: tuple[str, ...] | None = None
    around_turn: str | None = None
    context_turns: int = 2
    since_ms: int | None = None
    until_ms: int | None = None
    tool_name: str | None = None
    start_turn: int | None = None  # range by turn number within the thread
    end_turn: int | None = None
    before: int = 0  # search: turns shown before and after each hit, within its thread
    after: int = 0
    person: bool = False  # cover every session of the session's entity (recall_scope.py)


@dataclass(frozen=True, slots=True)
class Searched:
    hits: list[recall.Hit]
    some_words: bool  # no message has all the words; these have some of them
    around: dict[str, list[recall_thread.Neighbour]] = field(default_factory=dict)  # by turn
    also: tuple[str, ...] = ()  # the person's other sessions, searched too


Found = Searched | list[recall_reads.Entry] | recall_reads.Summary


def answer(conn: sqlite3.Connection, req: Request) -> Found:
    """What one call of the recall tool reads (`Ledger.recall` runs it)."""
    also = tuple(entity_sessions(conn, req.session)[1:]) if req.person and req.session else ()
    if req.action == "search":
        return _searched(conn, req, also)
    assert req.session is not None  # only search reads all sessions
    if req.action == "range" and (req.start_turn, req.end_turn) != (None, None):
        return recall_thread.by_number(conn, req.session, req.start_turn, req.end_turn, req.limit)
    if req.action == "range":
        return recall_reads.range(
            conn,
            req.session,
            req.around_turn,
            req.since_ms,
            req.until_ms,
            req.limit,
            context_turns=req.context_turns,
            also=also,
        )
    if req.action == "tool_calls":
        return recall_reads.tool_calls(conn, req.session, req.tool_name, req.limit, also)
    return recall_reads.summary(conn, req.session, also)


def _searched(conn: sqlite3.Connection, req: Request, also: tuple[str, ...] = ()) -> Searched:
    """Messages with all the words; if none has them all, those with some of them."""
    assert req.query is not None
    query = req.query
    scope = None if req.session is None else (req.session, *also)

    def run(match: recall.Match) -> list[recall.Hit]:
        return recall.search(
            conn,
            query,
            scope,
            req.limit,
            before_ms=req.until_ms,
            after_ms=req.since_ms,
            roles=req.roles,
            match=match,
        )

    hits = run("all")
    some_words = not hits and len(recall.terms(query)) >= 2
    if some_words:
        hits = run("any")
    return Searched(hits, some_words, _around(conn, hits, req.before, req.after), also)


def _around(
    conn: sqlite3.Connection, hits: list[recall.Hit], before: int, after: int
) -> dict[str, list[recall_thread.Neighbour]]:
    if not before and not after:
        return {}
    return {h.turn: recall_thread.neighbours(conn, h.turn, h.session, before, after) for h in hits}
