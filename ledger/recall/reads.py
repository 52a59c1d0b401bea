"""Conversation recall's reads over the verbatim history, beside its search
(`ledger/recall/search.py`): a run of a session's turns, its tool calls, its summary.

Sync functions over a sqlite3 connection (the ledger runs them on a reader); they
only read. Times are integer milliseconds (UTC), as stored. As in the search, a
session's history is every turn with its label, on every thread (after `/new`, after
a lost head race), aborted turns included: nothing is hidden.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ledger.port.errors import NotFound
from ledger.port.records import TOTALS, Compaction, Entry, Summary
from ledger.state_records import state_at

# -- ranges, tool calls, summary -------------------------------------------------


def range(  # shadows the builtin on purpose: the tool action is called range
    conn: sqlite3.Connection,
    session: str,
    around_turn: str | None = None,
    from_ms: int | None = None,
    to_ms: int | None = None,
    limit: int = 50,
    *,
    context_turns: int = 2,
    also: tuple[str, ...] = (),
) -> list[Entry]:
    """Messages and tool calls of a run of the session's turns, oldest first.

    `around_turn`: that turn and `context_turns` turns on each side. Otherwise
    the turns started in [from_ms, to_ms]: the first ones, or the last ones
    when only `to_ms` is given. At most `limit` entries, trimmed at the ends
    (for `around_turn`, the end farther from it).
    """
    require_session(conn, session)
    labels = (session, *also)
    if around_turn is not None:
        turn_ids = _turns_around(conn, labels, around_turn, context_turns)
        entries = _entries(conn, turn_ids)
        return _trim_around(entries, around_turn, limit)
    latest = to_ms is not None and from_ms is None
    rows = conn.execute(
        f"SELECT id FROM turns WHERE session_label IN ({_marks(labels)})"
        " AND started_at >= ? AND started_at <= ?"
        f" ORDER BY started_at {'DESC' if latest else 'ASC'}, id LIMIT ?",
        (
            *labels,
            -(2**62) if from_ms is None else from_ms,
            2**62 if to_ms is None else to_ms,
            limit,
        ),
    ).fetchall()
    entries = _entries(conn, [str(r[0]) for r in rows])
    return entries[-limit:] if latest else entries[:limit]


def require_session(conn: sqlite3.Connection, session: str) -> None:
    if conn.execute("SELECT 1 FROM sessions WHERE label = ?", (session,)).fetchone() is None:
        raise NotFound(f"no session {session!r}", field="session")


def _marks(labels: tuple[str, ...]) -> str:
    return ",".join("?" * len(labels))


def _turns_around(
    conn: sqlite3.Connection, labels: tuple[str, ...], turn: str, span: int
) -> list[str]:
    """`turn` (of one of `labels`) and `span` turns of its own session on each side."""
    row = conn.execute(
        f"SELECT started_at, session_label FROM turns WHERE id = ?"
        f" AND session_label IN ({_marks(labels)})",
        (turn, *labels),
    ).fetchone()
    if row is None:
        raise NotFound(f"no turn {turn!r} in session {labels[0]!r}", field="around_turn")
    key = (row[1], row[0], turn, span)
    before = conn.execute(
        "SELECT id FROM turns WHERE session_label = ? AND (started_at, id) < (?, ?)"
        " ORDER BY started_at DESC, id DESC LIMIT ?",
        key,
    ).fetchall()
    after = conn.execute(
        "SELECT id FROM turns WHERE session_label = ? AND (started_at, id) > (?, ?)"
        " ORDER BY started_at, id LIMIT ?",
        key,
    ).fetchall()
    return [str(r[0]) for r in reversed(before)] + [turn] + [str(r[0]) for r in after]


# In a turn: inputs, then tool calls, then the reply (tool_calls.seq numbers calls).
_PHASE = {"user": 0, "system": 0, "tool": 1, "assistant": 2}


def _entries(conn: sqlite3.Connection, turn_ids: list[str]) -> list[Entry]:
    if not turn_ids:
        return []
    marks = ",".join("?" * len(turn_ids))
    msgs = conn.execute(
        "SELECT t.session_label, m.turn_id, m.seq, m.role, m.created_at, m.content,"
        " NULL, NULL, NULL, t.status, t.started_at FROM messages m JOIN turns t"
        f" ON t.id = m.turn_id WHERE m.turn_id IN ({marks})",
        turn_ids,
    ).fetchall()
    calls = conn.execute(
        "SELECT t.session_label, c.turn_id, c.seq, 'tool', c.created_at, coalesce(c.result, ''),"
        " c.name, c.arguments, c.status, t.status, t.started_at FROM tool_calls c JOIN turns t"
        f" ON t.id = c.turn_id WHERE c.turn_id IN ({marks})",
        turn_ids,
    ).fetchall()
    rows = sorted(
        [*msgs, *calls],
        key=lambda r: (r[10], r[1], _PHASE.get(r[3], 2), r[6] is None, r[2]),
    )
    return [Entry(*r[:10]) for r in rows]


def _trim_around(entries: list[Entry], turn: str, limit: int) -> list[Entry]:
    inside = [i for i, e in enumerate(entries) if e.turn == turn]
    lo, hi = 0, len(entries)
    first, last = (inside[0], inside[-1] + 1) if inside else (0, 0)
    while hi - lo > limit:
        if first - lo >= hi - last and lo < first:
            lo += 1
        elif hi > last:
            hi -= 1
        else:  # the turn alone is longer than the limit: keep its start
            hi = lo + limit
    return entries[lo:hi]


def tool_calls(
    conn: sqlite3.Connection,
    session: str,
    name: str | None = None,
    limit: int = 20,
    also: tuple[str, ...] = (),
) -> list[Entry]:
    """The session's (and `also`'s) latest tool calls (of tool `name`), newest first."""
    require_session(conn, session)
    labels = (session, *also)
    sql = (
        "SELECT t.session_label, c.turn_id, c.seq, 'tool', c.created_at, coalesce(c.result, ''),"
        " c.name, c.arguments, c.status, t.status FROM turns t JOIN tool_calls c"
        f" ON c.turn_id = t.id WHERE t.session_label IN ({_marks(labels)})"
    )
    args: list[Any] = [*labels]
    if name is not None:
        sql += " AND c.name = ?"
        args.append(name)
    sql += " ORDER BY t.started_at DESC, t.id DESC, c.seq DESC LIMIT ?"
    return [Entry(*r) for r in conn.execute(sql, [*args, limit])]


def summary(conn: sqlite3.Connection, session: str, also: tuple[str, ...] = ()) -> Summary:
    """The latest compaction summary, the counts, the running totals and the current
    thread's state record of a session; the turns of each of `also`."""
    cols = ", ".join(f"total_{t}" for t in TOTALS)
    row = conn.execute(
        f"SELECT kind, status, created_at, head_turn_id, {cols} FROM sessions WHERE label = ?",
        (session,),
    ).fetchone()
    if row is None:
        raise NotFound(f"no session {session!r}", field="session")
    turns, first_at, last_at = conn.execute(
        "SELECT count(*), min(started_at), max(completed_at) FROM turns WHERE session_label = ?",
        (session,),
    ).fetchone()
    messages, calls = (
        conn.execute(
            f"SELECT count(*) FROM turns t JOIN {table} x ON x.turn_id = t.id"
            " WHERE t.session_label = ?",
            (session,),
        ).fetchone()[0]
        for table in ("messages", "tool_calls")
    )
    pad = conn.execute("SELECT state FROM scratchpad WHERE session_label = ?", (session,))
    state = pad.fetchone()
    return Summary(
        session=session,
        kind=row[0],
        status=row[1],
        created_at=int(row[2]),
        turns=int(turns),
        messages=int(messages),
        tool_calls=int(calls),
        first_at=first_at,
        last_at=last_at,
        totals=dict(zip(TOTALS, (int(v) for v in row[4:]), strict=True)),
        compaction=_latest_compaction(conn, session),
        scratchpad=None if state is None else str(state[0]),
        state=state_at(conn, row[3]),
        related=tuple(
            (str(r[0]), int(r[1]))
            for label in also
            for r in conn.execute("SELECT label, turns FROM sessions WHERE label = ?", (label,))
        ),
    )


def _latest_compaction(conn: sqlite3.Connection, session: str) -> Compaction | None:
    row = conn.execute(
        "SELECT turn_id, summary, created_at, turns_summarized, summarized_through_turn_id,"
        " first_kept_turn_id, trigger FROM compactions WHERE session_label = ?"
        " ORDER BY created_at DESC, turn_id DESC LIMIT 1",
        (session,),
    ).fetchone()
    return None if row is None else Compaction(*row)
