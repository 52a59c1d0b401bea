"""The library face's reads: plain functions of a read connection.

A session's items are its thread's messages, from the latest compaction turn (whose
items are the summary) to the head, in order, as the daemon's context loads them
(ledger/reads.py); a fork reads its ancestors' turns as its own. A daemon compaction
keeps its newest turns verbatim (its `compactions` row's `first_kept_turn_id`): they
sit before the compaction turn in the tree and read after it, so the walk goes on
past such a compaction to its first kept turn, and its rows carry a `part` (2 the
compaction, 1 a kept turn, 0 a turn since) that orders them first. A compaction turn
among the kept ones has no items: the later summary took its place. A turn the
daemon aborted shows its partial reply, not its inputs, which run again in a later
turn: every walk leaves out the 'user' messages of such a turn, kept or
not.

The last N items walk back from the head N/2 turns in one statement, so the cost
follows N, not the length of the thread; a thread with fewer items a turn (or empty
turns) takes a second, unbounded walk, unless the first reached its start. The first
walk stops at the latest compaction and sorts its rows here rather than in SQL
(docs/performance.md); a thread starting at a daemon's compaction, which alone keeps
turns, is read by the second, whole walk, which follows the kept turns.

`list_sessions(title_contains=)` matches case-insensitively by SQLite's lower(), which
folds ASCII letters only: "first" finds "First chat", "über" does not find "Über" (a
documented choice: docs/integrations.md).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from ledger.api.records import LIBRARY, Page, SessionInfo, TurnInfo, decode_item
from ledger.port.errors import NotFound

SESSION_COLUMNS = (
    "label, title, kind, origin, status, turns, head_turn_id, metadata, created_at,"
    " updated_at, parent_session, parent_turn_id, total_prompt_tokens, total_completion_tokens"
)


def _session(row: tuple[Any, ...]) -> SessionInfo:
    return SessionInfo(
        id=row[0],
        title=row[1],
        kind=row[2],
        origin=row[3],
        status=row[4],
        turns=int(row[5]),
        head_turn=row[6],
        metadata=orjson.loads(row[7]) if row[7] else {},
        created_at=int(row[8]),
        updated_at=int(row[9]),
        parent_session=row[10],
        parent_turn=row[11],
        prompt_tokens=int(row[12]),
        completion_tokens=int(row[13]),
    )


def get(conn: sqlite3.Connection, label: str) -> SessionInfo:
    row = conn.execute(
        f"SELECT {SESSION_COLUMNS} FROM sessions WHERE label = ?", (label,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no session {label!r}", field="session")
    return _session(row)


def exists(conn: sqlite3.Connection, label: str) -> bool:
    return conn.execute("SELECT 1 FROM sessions WHERE label = ?", (label,)).fetchone() is not None


def list_sessions(
    conn: sqlite3.Connection,
    *,
    kind: str | None = None,
    title_contains: str | None = None,
    updated_after: int | None = None,
    cursor: str | None = None,
    limit: int = 100,
) -> Page:
    """Sessions in label order, `limit` at a time; `cursor` is the last label seen."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    where, args = ["1 = 1"], []
    for clause, value in (
        ("kind = ?", kind),
        ("instr(lower(coalesce(title, '')), lower(?)) > 0", title_contains),
        ("updated_at > ?", updated_after),
        ("label > ?", cursor),
    ):
        if value is not None:
            where.append(clause)
            args.append(value)
    rows = conn.execute(
        f"SELECT {SESSION_COLUMNS} FROM sessions WHERE {' AND '.join(where)}"
        " ORDER BY label LIMIT ?",
        (*args, limit + 1),
    ).fetchall()
    page = [_session(r) for r in rows[:limit]]
    return Page(page, page[-1].id if len(rows) > limit else None)


# The walk's bound is a depth, not a LIMIT inside the recursive query: PostgreSQL
# has no LIMIT there (ledger/postgres). WHOLE walks the whole thread.
WHOLE = 2**62
# A walked turn's `aborted`: a flag, not its status, so the test of each message is
# not a comparison of texts.
_ABORTED = "t.status = 'aborted'"
# `part` and `target` (the first kept turn the walk goes on to): a daemon compaction's
# kept turns read after its summary.
_KEPT = "(SELECT first_kept_turn_id FROM compactions WHERE turn_id = t.id)"
_WALK = (
    "WITH RECURSIVE chain(id, depth, type, parent, engine, aborted, part, target) AS ("
    f" SELECT t.id, 0, t.type, t.parent_id, t.engine, {_ABORTED},"
    " CASE WHEN t.type = 'compaction' THEN 2 ELSE 0 END,"
    f" CASE WHEN t.type = 'compaction' THEN {_KEPT} END FROM sessions s"
    " JOIN turns t ON t.id = s.head_turn_id WHERE s.label = ?"
    f" UNION ALL SELECT t.id, c.depth + 1, t.type, t.parent_id, t.engine, {_ABORTED},"
    " CASE WHEN c.part != 0 THEN 1 WHEN t.type = 'compaction' THEN 2 ELSE 0 END,"
    f" CASE WHEN c.part = 0 AND t.type = 'compaction' THEN {_KEPT} ELSE c.target END"
    " FROM chain c JOIN turns t ON t.id = c.parent WHERE c.depth + 1 < ? AND"
    " (c.part = 0 AND c.type != 'compaction' OR c.part = 2 AND c.target IS NOT NULL"
    " OR c.part = 1 AND c.id != c.target))"
)
# A message an aborted turn hides: one of its inputs.
_VISIBLE = "(NOT c.aborted OR m.role != 'user')"
# The messages a walked turn shows: none of a compaction's among kept turns.
_SHOWN = f"m.turn_id = c.id AND (c.part != 1 OR c.type != 'compaction') AND {_VISIBLE}"
# The first walk of `last_items`: it stops at the latest compaction.
_FIRST_WALK = (
    "WITH RECURSIVE chain(id, depth, type, parent, engine, aborted) AS ("
    f" SELECT t.id, 0, t.type, t.parent_id, t.engine, {_ABORTED} FROM sessions s"
    " JOIN turns t ON t.id = s.head_turn_id WHERE s.label = ?"
    f" UNION ALL SELECT t.id, c.depth + 1, t.type, t.parent_id, t.engine, {_ABORTED} FROM chain c"
    " JOIN turns t ON t.id = c.parent WHERE c.type != 'compaction' AND c.depth + 1 < ?)"
)
# A message's role is needed only when it is not a library item (records.py).
_ROLE = f"CASE WHEN c.engine = '{LIBRARY}' THEN NULL ELSE m.role END"
# ... and '' marks a daemon's compaction turn, which may have kept turns.
_FIRST_ROLE = (
    f"CASE WHEN c.engine = '{LIBRARY}' THEN NULL WHEN c.type = 'compaction' THEN '' ELSE m.role END"
)
_LAST_TURNS = (
    f"{_FIRST_WALK} SELECT -c.depth, m.seq, {_FIRST_ROLE}, m.content FROM chain c"
    f" LEFT JOIN messages m ON m.turn_id = c.id AND {_VISIBLE}"
)
_LAST_ITEMS = (
    f"{_WALK} SELECT {_ROLE}, m.content FROM chain c"
    f" JOIN messages m ON {_SHOWN} ORDER BY c.part, c.depth, m.seq DESC LIMIT ?"
)


def last_items(conn: sqlite3.Connection, label: str, n: int) -> list[Any]:
    """The last `n` items of the session, oldest first."""
    if n <= 0:
        if not exists(conn, label):
            raise NotFound(f"no session {label!r}", field="session")
        return []
    # Most threads hold two or more items a turn (a question and its answer), so
    # half as many turns as items is walked first: the walk is most of the cost.
    depth = (n + 1) // 2
    rows = conn.execute(_LAST_TURNS, (label, depth)).fetchall()
    if not rows:  # no head turn: an empty session, or none
        if not exists(conn, label):
            raise NotFound(f"no session {label!r}", field="session")
        return []
    rows.sort()  # oldest turn first (the deepest), then seq; (depth, seq) is unique
    walked_to_its_start = -rows[0][0] < depth - 1  # the walk stopped before its bound
    found = [(role, content) for _, _, role, content in rows if content is not None]
    # A daemon's compaction at the start: its kept turns read after it.
    if rows[0][2] == "" or (len(found) < n and not walked_to_its_start):
        found = conn.execute(_LAST_ITEMS, (label, WHOLE, n)).fetchall()
        found.reverse()
    return [
        orjson.loads(content) if role is None else {"role": role, "content": content}
        for role, content in found[-n:]
    ]


def turns(conn: sqlite3.Connection, label: str) -> list[TurnInfo]:
    """The thread's turns from the latest compaction to the head, with their items,
    in the order of their items."""
    return thread(conn, label)[1]


def thread(conn: sqlite3.Connection, label: str) -> tuple[str | None, list[TurnInfo]]:
    """The head and `turns`, of one moment: the last of the turns is not always the
    head, and a compaction must know what it summarized (writes.py)."""
    rows = conn.execute(
        f"{_WALK} SELECT c.id, t.session_label, c.type, t.completed_at, c.engine, m.role,"
        f" m.content, c.depth, t.prompt_tokens, t.completion_tokens, t.summary, t.metadata"
        " FROM chain c"
        " JOIN turns t ON t.id = c.id"
        f" LEFT JOIN messages m ON {_SHOWN} WHERE c.part != 1 OR c.type != 'compaction'"
        " ORDER BY c.part DESC, c.depth DESC, m.seq",
        (label, WHOLE),
    ).fetchall()
    if not rows and not exists(conn, label):
        raise NotFound(f"no session {label!r}", field="session")
    out: list[TurnInfo] = []
    head = None
    for row in rows:
        turn_id, session, kind, at, engine, role, content, depth, prompt, completion = row[:10]
        if not out or out[-1].id != turn_id:
            summary, metadata = (None if v is None else orjson.loads(v) for v in row[10:])
            out.append(
                TurnInfo(turn_id, session, kind, [], int(at), prompt, completion, summary, metadata)
            )
            head = turn_id if depth == 0 else head
        if content is not None:
            out[-1].items.append(decode_item(engine, role, content))
    return head, out


def items(conn: sqlite3.Connection, label: str) -> list[Any]:
    """Every item of the thread, oldest first."""
    rows = conn.execute(
        f"{_WALK} SELECT c.engine, m.role, m.content FROM chain c"
        f" JOIN messages m ON {_SHOWN} ORDER BY c.part DESC, c.depth DESC, m.seq",
        (label, WHOLE),
    ).fetchall()
    if not rows and not exists(conn, label):
        raise NotFound(f"no session {label!r}", field="session")
    return [decode_item(e, r, c) for e, r, c in rows]


def turn_session(conn: sqlite3.Connection, turn_id: str) -> str:
    row = conn.execute("SELECT session_label FROM turns WHERE id = ?", (turn_id,)).fetchone()
    if row is None:
        raise NotFound(f"no turn {turn_id!r}", field="turn")
    return str(row[0])
