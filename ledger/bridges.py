"""Bridge notes: what a session merged into another was about, for the survivor's
next turn (turn trees are never merged; memory bridges them).

An entity merge that demotes a DM session leaves, in its own transaction, one note
per demoted session for the primary: that session's latest compaction summary (cut
to `SUMMARY_CHARS`) and its state record; a session with no turns leaves none. A note
waits, durably, until a turn whose context showed it completes: that turn's commit
marks it consumed (ledger/state_records.py), so the first turn after a merge shows
it, the second does not, and a restart in between changes nothing.
"""

from __future__ import annotations

import sqlite3

from core.session_state import render
from ledger.state_records import state_at
from plumbing.ids import new_id

SUMMARY_CHARS = 1500


def record_bridges(
    conn: sqlite3.Connection, primary: str, merged: list[str], now: int
) -> dict[str, str]:
    """Leave a note for `primary` about each of the `merged` sessions; the
    notes left, by id."""
    left: dict[str, str] = {}
    for label in merged:
        note = _note(conn, label)
        if note is None:
            continue
        bridge = new_id()
        conn.execute(
            "INSERT INTO bridge_notes (id, session_label, merged_session, note, created_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_label, merged_session)"
            " WHERE consumed_turn_id IS NULL DO UPDATE SET note = excluded.note",
            (bridge, primary, label, note, now),
        )
        (kept,) = conn.execute(
            "SELECT id FROM bridge_notes WHERE session_label = ? AND merged_session = ?"
            " AND consumed_turn_id IS NULL",
            (primary, label),
        ).fetchone()
        left[str(kept)] = note
    return left


def _note(conn: sqlite3.Connection, label: str) -> str | None:
    row = conn.execute(
        "SELECT head_turn_id, turns FROM sessions WHERE label = ?", (label,)
    ).fetchone()
    if row is None or not row[1]:
        return None
    summary = conn.execute(
        "SELECT summary FROM compactions WHERE session_label = ?"
        " ORDER BY created_at DESC, turn_id DESC LIMIT 1",
        (label,),
    ).fetchone()
    parts = [
        f"This person also talked with you in session {label}, which is now merged into"
        " this one. Its history stays there; conversation_recall searches it."
    ]
    if summary is not None:
        text = str(summary[0])
        if len(text) > SUMMARY_CHARS:
            text = text[: SUMMARY_CHARS - 1] + "…"
        parts.append(f"Its latest summary:\n{text}")
    state = render(state_at(conn, row[0]), label)
    if state is not None:
        parts.append(state)
    return "\n".join(parts)


def pending_bridges(conn: sqlite3.Connection, label: str) -> dict[str, str]:
    """The notes waiting for `label`'s next completed turn, oldest first, by id."""
    return {
        str(r[0]): str(r[1])
        for r in conn.execute(
            "SELECT id, note FROM bridge_notes WHERE session_label = ?"
            " AND consumed_turn_id IS NULL ORDER BY created_at, id",
            (label,),
        )
    }
