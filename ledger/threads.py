"""Threads and resets; the decision is `core/resets.py`.

A session's turns fall into threads, numbered from 1. A new thread is decided (a
`threads` row, `pending`: by ledger/resets.py inside the transaction that files the
person's message triggering it, by `/new` at its cut, or by an operator's op) and then
begun by its cut: the session's actor, between turns, moves the head off the old
thread (`start_thread`). The cut never runs under a turn and is idempotent by thread
number: a pending row is begun once, and a cut that finds its row begun changes
nothing. `threads` rows are never deleted, nor any turn of an old thread.

An automatic rollover begins from what the old thread knew: its state record seeds
the new thread's (ledger/state_records.py), and its latest summary, if any, becomes a
compaction turn at the new thread's root. An explicit reset begins empty, dropping a
seed no turn has used yet.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from core.resets import AUTOMATIC
from ledger.port.errors import Conflict, NotFound
from ledger.port.records import Carry, TurnRecord
from ledger.recent import block_of
from ledger.state_records import drop_seed, seed_thread, state_at
from ledger.turns import commit_turn


def start_thread(
    conn: sqlite3.Connection,
    session: str,
    thread: int | None,
    reason: str,
    carry: Carry | None,
    now: int,
) -> int | None:
    """The cut: begin pending thread `thread`, or with None a new thread
    for `reason` (`/new`), from the carry-over if one is given. The number
    of the thread begun; None if it was begun already."""
    pending = conn.execute(
        "SELECT n, prev_base FROM threads WHERE session_label = ? AND status = 'pending'"
        " ORDER BY n",
        (session,),
    ).fetchall()
    waiting = [int(n) for n, _ in pending]
    if thread is not None and thread not in waiting:
        return None  # begun already
    row = conn.execute(
        "SELECT head_turn_id, turns, thread_turns_base, thread FROM sessions WHERE label = ?",
        (session,),
    ).fetchone()
    if row is None:
        raise NotFound(f"no session {session!r}", field="session")
    head, turns, base, current = row
    if pending:
        base = pending[0][1]  # of the thread that runs until this cut
    if thread is None:
        thread = max([current, *waiting]) + 1
        conn.execute(
            "INSERT INTO threads (session_label, n, reason, started_at, status, prev_base)"
            " VALUES (?, ?, ?, ?, 'pending', ?)",
            (session, thread, reason, now, base),
        )
        waiting.append(thread)
    # Threads decided before this one and not begun begin and end with this cut.
    ended_head, ended_turns = head, None if base is None else turns - base
    for n in [n for n in waiting if n <= thread]:
        conn.execute(
            "UPDATE threads SET status = 'started', cut_at = ?, prev_head = ?, prev_turns = ?"
            " WHERE session_label = ? AND n = ?",
            (now, ended_head, ended_turns, session, n),
        )
        ended_head, ended_turns = None, 0
    conn.execute(
        "UPDATE sessions SET head_turn_id = NULL, updated_at = ?, updated_block = ?"
        " WHERE label = ?",
        (now, block_of(now), session),
    )
    conn.execute(
        "INSERT INTO session_history (session_label, turn_id, prev_turn_id, reason, changed_at)"
        " VALUES (?, NULL, ?, 'new_thread', ?)",
        (session, head, now),
    )
    if reason in AUTOMATIC:
        seed_thread(conn, session, state_at(conn, head), now)
    else:
        drop_seed(conn, session)
    if carry is not None:
        commit_turn(conn, _carry_turn(session, carry, head, now))
        conn.execute(
            "UPDATE threads SET carry_turn_id = ? WHERE session_label = ? AND n = ?",
            (carry.turn_id, session, thread),
        )
    later = [n for n in waiting if n > thread]
    if later:  # decided after this one: still waiting for its own cut
        conn.execute(
            "UPDATE threads SET prev_base = (SELECT turns FROM sessions WHERE label = ?)"
            " WHERE session_label = ? AND n = ?",
            (session, session, later[0]),
        )
        return thread
    conn.execute(
        "UPDATE sessions SET thread = ?, thread_started_at ="
        " (SELECT started_at FROM threads WHERE session_label = ? AND n = ?),"
        " thread_turns_base = turns WHERE label = ?",
        (thread, session, thread, session),
    )
    return thread


def _carry_turn(session: str, carry: Carry, previous: str | None, now: int) -> TurnRecord:
    return TurnRecord(
        turn_id=carry.turn_id,
        session=session,
        parent_id=None,
        type="compaction",
        status="completed",
        reason="rollover",
        error=None,
        output=carry.summary,
        engine="",
        model=None,
        started_at=now,
        completed_at=now,
        prompt_tokens=None,
        completion_tokens=None,
        inputs=[],
        item_status="done",
        compaction={
            "summary": carry.summary,
            "summarized_through_turn_id": previous,
            "first_kept_turn_id": None,
            "turns_summarized": 0,
            "trigger": "rollover",
        },
    )


def list_threads(conn: sqlite3.Connection, session: str) -> list[dict[str, Any]]:
    """`session.threads`: every thread of the session, oldest first."""
    row = conn.execute(
        "SELECT created_at, head_turn_id, turns, thread_turns_base FROM sessions WHERE label = ?",
        (session,),
    ).fetchone()
    if row is None:
        raise NotFound(f"no session {session!r}", field="session")
    created, head, turns, base = row
    later = conn.execute(
        "SELECT n, reason, started_at, status, prev_head, prev_turns, prev_base FROM threads"
        " WHERE session_label = ? ORDER BY n",
        (session,),
    ).fetchall()
    out = [_thread(1, "first", created)]
    begun = [True]
    for n, reason, started_at, status, prev_head, prev_turns, prev_base in later:
        before = out[-1]
        before["ended_at"] = started_at
        if status == "started":
            before["head"], before["turns"] = prev_head, prev_turns
        elif begun[-1]:  # the thread before runs until this one's cut
            before["head"] = head
            before["turns"] = None if prev_base is None else turns - prev_base
        out.append(_thread(n, reason, started_at))
        begun.append(status == "started")
    if begun[-1]:
        out[-1]["head"] = head
        out[-1]["turns"] = None if base is None else turns - base
    return out


def _thread(n: int, reason: str, started_at: int) -> dict[str, Any]:
    return {
        "thread": n,
        "head": None,
        "turns": 0,
        "started_at": started_at,
        "ended_at": None,
        "reason": reason,
    }


def cancel_item(conn: sqlite3.Connection, session: str, item: str, now: int) -> None:
    """`item.cancel`: a waiting item never runs (status and reason `cancelled`)."""
    row = conn.execute(
        "SELECT session_label, status FROM queue_items WHERE id = ?", (item,)
    ).fetchone()
    if row is None or row[0] != session:
        raise NotFound(f"no item {item!r} in session {session!r}", field="item")
    if row[1] != "queued":
        raise Conflict(
            f"item {item!r} is {row[1]}: only a waiting item can be cancelled", field="item"
        )
    conn.execute(
        "UPDATE queue_items SET status = 'cancelled', reason = 'cancelled', updated_at = ?"
        " WHERE id = ?",
        (now, item),
    )
