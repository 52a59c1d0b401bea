"""What one call of the `conversation_recall` tool reads (broker/tools/recall.py).

The tool checks its arguments into a `Request`; `answer` (which `Ledger.recall`
runs on a reader) does the reads it asks for and returns what they found, for
the tool to shape into text. The searches themselves are `ledger/recall/search.py`, the
other reads `ledger/recall/reads.py`.
"""

from __future__ import annotations

import sqlite3

from core.reach import REFUSED
from ledger import reach
from ledger.port.errors import NotReachable
from ledger.port.records import Found, Hit, Neighbour, Reaching, Request, Searched
from ledger.recall import reads as recall_reads
from ledger.recall import search as recall
from ledger.recall import thread as recall_thread
from ledger.recall import vectors
from ledger.recall.scope import entity_sessions


def answer(conn: sqlite3.Connection, req: Request) -> Found:
    """What one call of the recall tool reads (`Ledger.recall` runs it); a call past
    its turn's reach (`req.reaching`) raises `NotReachable`, checked in this read."""
    if req.reaching is not None:
        _check_reach(conn, req, req.reaching)
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


def _check_reach(conn: sqlite3.Connection, req: Request, by: Reaching) -> None:
    if req.session is not None and not reach.reaches(conn, by.session, req.session, by.wide):
        raise NotReachable(REFUSED, field="session")
    if req.around_turn is not None and not reach.turn_reaches(
        conn, by.session, req.around_turn, by.wide
    ):
        raise NotReachable(REFUSED, field="around_turn")


def _searched(conn: sqlite3.Connection, req: Request, also: tuple[str, ...] = ()) -> Searched:
    """Messages with all the words; if none has them all, those with some of them. All
    sessions (`req.session` None) are, for a broker tool, all those its turn reaches."""
    assert req.query is not None
    query = req.query
    scope: tuple[str, ...] | None = None if req.session is None else (req.session, *also)
    if scope is None and req.reaching is not None:
        found = reach.reachable(conn, req.reaching.session, req.reaching.wide)
        scope = None if found is None else tuple(found)

    def run(match: recall.Match) -> list[Hit]:
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

    def by_meaning() -> list[Hit]:
        if req.query_vector is None:
            raise ValueError("a search by meaning needs the query's vector")
        return vectors.nearest(
            conn, req.query_vector, scope, req.limit, req.until_ms, req.since_ms, req.roles
        )

    if req.mode == "meaning":
        hits = by_meaning()
        return Searched(hits, False, _around(conn, hits, req.before, req.after), also)
    hits = run("all")
    some_words = not hits and len(recall.terms(query)) >= 2
    if some_words:
        hits = run("any")
    if req.mode == "both":
        hits, some_words = vectors.fuse([hits, by_meaning()], req.limit), False
    return Searched(hits, some_words, _around(conn, hits, req.before, req.after), also)


def _around(
    conn: sqlite3.Connection, hits: list[Hit], before: int, after: int
) -> dict[str, list[Neighbour]]:
    if not before and not after:
        return {}
    return {h.turn: recall_thread.neighbours(conn, h.turn, h.session, before, after) for h in hits}
