"""A turn written as the daemon commits one, for tests of the library face on a
ledger that both write (a served ledger mixes the two)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ledger.ids import new_id


def daemon_turn(path: Path, session: str, texts: list[str], now: int) -> str:
    """A turn as the daemon commits one (ledger/turns.py commit_turn): its engine's
    own, plain-text messages, the session's count and time moved with its head."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("BEGIN IMMEDIATE")
        head = conn.execute(
            "SELECT head_turn_id FROM sessions WHERE label = ?", (session,)
        ).fetchone()[0]
        turn = new_id()
        conn.execute(
            "INSERT INTO turns (id, session_label, parent_id, type, status, engine,"
            " started_at, completed_at) VALUES (?, ?, ?, 'turn', 'completed', 'echo', ?, ?)",
            (turn, session, head, now, now),
        )
        for seq, text in enumerate(texts):
            conn.execute(
                "INSERT INTO messages (turn_id, seq, role, content, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (turn, seq, ("user", "assistant")[seq % 2], text, now),
            )
        conn.execute(
            "UPDATE sessions SET head_turn_id = ?, turns = turns + 1, updated_at = ?"
            " WHERE label = ?",
            (turn, now, session),
        )
        conn.execute("COMMIT")
    conn.close()
    return turn
