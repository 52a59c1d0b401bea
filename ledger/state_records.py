"""The session-state record of a thread (core/session_state.py), stored per turn.

Every turn committed on a thread gets a `turn_state` row in its own transaction:
`advance(record of its parent, facts of the turn)`. The record of a thread is its
head's row, so a fork inherits exactly its ancestors' part, a new thread starts empty
(or from the record an automatic rollover carried over, `seed_thread`, which its first
turn takes and removes), and reading it is one indexed lookup. A turn committed
before the table existed has no row: its record is worked out from its stored rows,
from the nearest ancestor with a row, at most `MAX_WALK` turns up, with the facts the
commit had, so both ways give the same record (tests/unit/test_state_records.py).

The writer's connection keeps the record it stored last for each session
(`LastRecords`), so the thread's next turn takes its parent's record from there
(docs/performance.md). A turn's row never changes once written, and the writer drops
the entries whenever anything rolls back, so none outlives the row it mirrors.
"""

from __future__ import annotations

import sqlite3

import orjson

from core.engine_types import ToolCall
from core.session_state import (
    EMPTY,
    SessionState,
    TurnFacts,
    advance,
    dumps,
    loads,
)
from ledger.port.errors import NotFound
from ledger.port.records import TurnRecord, facts_of

MAX_WALK = 5000  # turns without a row worked out in one go
LAST_RECORDS_LIMIT = 10_000  # sessions whose last record the writer keeps


class LastRecords:
    """By session, the turn whose record the writer stored last, and the record."""

    def __init__(self) -> None:
        self._by_session: dict[str, tuple[str, SessionState]] = {}

    def get(self, session: str, turn_id: str) -> SessionState | None:
        entry = self._by_session.get(session)
        return entry[1] if entry is not None and entry[0] == turn_id else None

    def put(self, session: str, turn_id: str, state: SessionState) -> None:
        if len(self._by_session) >= LAST_RECORDS_LIMIT and session not in self._by_session:
            self._by_session.clear()  # the next turn of each reads its row once
        self._by_session[session] = (turn_id, state)

    def clear(self) -> None:
        self._by_session.clear()


def record_turn_state(conn: sqlite3.Connection, rec: TurnRecord) -> SessionState:
    """Store the record after `rec`, a turn committed on its thread now; if it
    completed, the bridge notes its context showed are consumed (ledger/bridges.py)."""
    last: LastRecords | None = getattr(conn, "last_records", None)  # the writer's
    before = None
    if rec.parent_id is None:
        before = thread_seed(conn, rec.session)
        conn.execute("DELETE FROM thread_seeds WHERE session_label = ?", (rec.session,))
    elif last is not None:
        before = last.get(rec.session, rec.parent_id)
    if before is None:
        before = state_at(conn, rec.parent_id)
    after = advance(before, facts_of(rec))
    conn.execute(
        "INSERT INTO turn_state (turn_id, state) VALUES (?, ?)"
        " ON CONFLICT (turn_id) DO UPDATE SET state = excluded.state",
        (rec.turn_id, dumps(after).decode()),
    )
    if last is not None:
        last.put(rec.session, rec.turn_id, after)
    if rec.bridges and rec.status == "completed":
        conn.executemany(
            "UPDATE bridge_notes SET consumed_turn_id = ? WHERE id = ?"
            " AND consumed_turn_id IS NULL",
            [(rec.turn_id, bridge) for bridge in rec.bridges],
        )
    return after


def seed_thread(conn: sqlite3.Connection, label: str, state: SessionState, now: int) -> None:
    """The session's next thread starts from `state`: for an automatic
    rollover, which carries the old thread's record (`state_at` its head) over."""
    conn.execute(
        "INSERT INTO thread_seeds (session_label, state, created_at) VALUES (?, ?, ?)"
        " ON CONFLICT (session_label) DO UPDATE SET state = excluded.state,"
        " created_at = excluded.created_at",
        (label, dumps(state).decode(), now),
    )


def drop_seed(conn: sqlite3.Connection, label: str) -> None:
    """An explicit reset begins empty (threads.py), whatever was seeded."""
    conn.execute("DELETE FROM thread_seeds WHERE session_label = ?", (label,))


def thread_seed(conn: sqlite3.Connection, label: str) -> SessionState:
    """The record the session's next thread starts from: EMPTY but after a
    rollover that carried one over."""
    row = conn.execute(
        "SELECT state FROM thread_seeds WHERE session_label = ?", (label,)
    ).fetchone()
    return EMPTY if row is None else loads(row[0])


def state_at(conn: sqlite3.Connection, turn_id: str | None) -> SessionState:
    """The record of the thread whose head is `turn_id` (None: an empty thread)."""
    if turn_id is None:
        return EMPTY
    row = conn.execute("SELECT state FROM turn_state WHERE turn_id = ?", (turn_id,)).fetchone()
    if row is not None:
        return loads(row[0])
    return _worked_out(conn, turn_id)


def _worked_out(conn: sqlite3.Connection, turn_id: str) -> SessionState:
    """From the nearest ancestor with a row (or the root) down to `turn_id`."""
    if conn.execute("SELECT 1 FROM turns WHERE id = ?", (turn_id,)).fetchone() is None:
        raise NotFound(f"no turn {turn_id!r}", field="turn")
    chain = conn.execute(
        "WITH RECURSIVE chain(id, depth) AS (SELECT ?, 0 UNION ALL"
        " SELECT t.parent_id, c.depth + 1 FROM turns t JOIN chain c ON t.id = c.id"
        " WHERE t.parent_id IS NOT NULL AND c.depth < ?"
        " AND NOT EXISTS (SELECT 1 FROM turn_state s WHERE s.turn_id = c.id))"
        " SELECT c.id, s.state FROM chain c LEFT JOIN turn_state s ON s.turn_id = c.id"
        " ORDER BY c.depth DESC",
        (turn_id, MAX_WALK),
    ).fetchall()
    state = EMPTY
    for tid, stored in chain:
        if stored is not None:
            state = loads(stored)
            continue
        facts = stored_facts(conn, str(tid))
        if facts is not None:
            state = advance(state, facts)
    return state


def stored_facts(conn: sqlite3.Connection, turn_id: str) -> TurnFacts | None:
    """The facts of a committed turn, read back from its rows."""
    row = conn.execute(
        "SELECT type, status, error, model, prompt_tokens, completion_tokens FROM turns"
        " WHERE id = ?",
        (turn_id,),
    ).fetchone()
    if row is None:
        return None
    inputs = conn.execute(
        "SELECT coalesce(q.source, 'person'), m.content FROM messages m"
        " LEFT JOIN queue_items q ON q.id = m.item_id"
        " WHERE m.turn_id = ? AND m.role = 'user' ORDER BY m.seq",
        (turn_id,),
    ).fetchall()
    calls = conn.execute(
        "SELECT id, name, coalesce(arguments, ''), coalesce(result, ''), status"
        " FROM tool_calls WHERE turn_id = ? ORDER BY seq",
        (turn_id,),
    ).fetchall()
    events = conn.execute(
        "SELECT type, payload FROM turn_events WHERE turn_id = ? ORDER BY seq", (turn_id,)
    ).fetchall()
    return TurnFacts(
        type=str(row[0]),
        status=str(row[1]),
        error=row[2],
        model=row[3],
        inputs=tuple((str(s), str(c)) for s, c in inputs),
        tool_calls=tuple(
            ToolCall(str(i), str(n), str(a), str(r), "error" if s == "error" else "ok")
            for i, n, a, r, s in calls
        ),
        events=tuple((str(k), orjson.loads(p)) for k, p in events),
        prompt_tokens=int(row[4] or 0),
        completion_tokens=int(row[5] or 0),
    )
