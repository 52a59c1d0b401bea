"""Deciding a new thread: the ledger side of `core/resets.py`.

An automatic reset is decided inside the transaction that files the person's message
that triggers it (`on_person_message`, called by ingest.py): a crash keeps both or
neither, and the message is queued in the new thread, never swallowed. The session's
actor begins the thread before its next turn (threads.py `start_thread`). Only a
person's message counts as activity (`person_activity`); timer, worker and operator
items are filed elsewhere and never touch it.
"""

from __future__ import annotations

import sqlite3
from functools import lru_cache
from zoneinfo import ZoneInfo

from core.resets import ResetPolicy, decide
from ledger.closing import refuse_closed
from ledger.port.errors import NotFound
from ledger.recent import block_of


@lru_cache(maxsize=64)
def zone(name: str) -> ZoneInfo:
    """The zone of a policy, loaded once per process (the config checked the name)."""
    return ZoneInfo(name)


def on_person_message(
    conn: sqlite3.Connection, session: str, policy: ResetPolicy | None, item: str, now: int
) -> tuple[int, str] | None:
    """Note a person's message and decide whether it starts a new thread
    first: the new thread's (number, reason), or None."""
    reason = None
    if policy is not None and policy.active:
        row = conn.execute(
            "SELECT s.thread_started_at, s.thread_turns_base, s.turns, a.at FROM sessions s"
            " LEFT JOIN person_activity a ON a.session_label = s.label WHERE s.label = ?",
            (session,),
        ).fetchone()
        started, base, turns, last = row
        since = max((t for t in (last, started) if t is not None), default=None)
        thread_turns = 0 if base is None else turns - base  # pending: no turn yet
        reason = decide(policy, since, thread_turns, now, zone(policy.timezone))
    conn.execute(
        "INSERT INTO person_activity (session_label, at) VALUES (?, ?)"
        " ON CONFLICT (session_label) DO UPDATE SET at = excluded.at",
        (session, now),
    )
    if reason is None:
        return None
    return decide_thread(conn, session, reason, item, now), reason


def decide_thread(
    conn: sqlite3.Connection, session: str, reason: str, item: str | None, now: int
) -> int:
    """A new pending thread of `session`, decided at `now` (for the message `item`, if
    a message decided it); its number."""
    row = conn.execute(
        "SELECT thread, thread_turns_base FROM sessions WHERE label = ?", (session,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no session {session!r}", field="session")
    n = int(row[0]) + 1
    conn.execute(
        "INSERT INTO threads (session_label, n, reason, started_at, item_id, status, prev_base)"
        " VALUES (?, ?, ?, ?, ?, 'pending', ?)",
        (session, n, reason, now, item, row[1]),
    )
    conn.execute(
        "UPDATE sessions SET thread = ?, thread_started_at = ?, thread_turns_base = NULL,"
        " updated_at = ?, updated_block = ? WHERE label = ?",
        (n, now, now, block_of(now), session),
    )
    return n


def reset(conn: sqlite3.Connection, session: str, reason: str, now: int) -> int:
    """`session.reset`: decide a new thread for the actor to begin; its number. A
    closed session takes none (`Conflict`)."""
    refuse_closed(conn, session, "session")
    return decide_thread(conn, session, reason, None, now)


def pending_thread(conn: sqlite3.Connection, label: str) -> tuple[int, str, int] | None:
    """The latest thread decided for the session and not yet begun (threads.py):
    (number, reason, the seq of the message that decided it or 0), or None."""
    row = conn.execute(
        "SELECT t.n, t.reason, coalesce(q.seq, 0) FROM threads t"
        " LEFT JOIN queue_items q ON q.id = t.item_id"
        " WHERE t.session_label = ? AND t.status = 'pending' ORDER BY t.n DESC LIMIT 1",
        (label,),
    ).fetchone()
    return None if row is None else (int(row[0]), str(row[1]), int(row[2]))
