"""The turn a session runs now, as `session.show` lists it: after its thread, `running`.

A running turn is known by its items: `mark_running` stamps them with its id and its
start (ledger/turns.py); no items running, no running turn. Its output is what it
saved while streaming (`turn_progress`), so it grows every `engine.progress_save_s`
while the turn speaks; its title is an engine's `intent` title among the events
written so far, else the mechanical one from its inputs (core/titles.py).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from core.titles import mechanical_title, turn_title


def running_turn(conn: sqlite3.Connection, label: str, head: str | None) -> dict[str, Any] | None:
    """The session's running turn in `thread_turns`' shape, or None."""
    items = conn.execute(
        "SELECT q.turn_id, q.updated_at, i.msg_id, coalesce(i.text, q.payload) FROM queue_items q"
        " LEFT JOIN inbound i ON i.id = q.inbound_id"
        " WHERE q.session_label = ? AND q.status = 'running' ORDER BY q.seq",
        (label,),
    ).fetchall()
    if not items:
        return None
    turn_id = items[0][0]
    texts = [str(text or "") for *_, text in items]
    saved = conn.execute(
        "SELECT output, updated_at FROM turn_progress WHERE turn_id = ?", (turn_id,)
    ).fetchone()
    events = [
        (str(kind), orjson.loads(payload))
        for kind, payload in conn.execute(
            "SELECT type, payload FROM turn_events WHERE turn_id = ? AND type = 'intent'"
            " ORDER BY seq",
            (turn_id,),
        )
    ]
    (count,) = conn.execute(
        "SELECT count(*) FROM turn_events WHERE turn_id = ?", (turn_id,)
    ).fetchone()
    title, source = (
        turn_title(texts, "", events) if events else (mechanical_title(texts, ""), "mechanical")
    )
    return {
        "id": turn_id,
        "parent": head,
        "type": "turn" if len(items) == 1 else "queue_batch",
        "status": "running",
        "reason": None,
        "inputs": [msg_id for _, _, msg_id, _ in items if msg_id is not None],
        "output": saved[0] if saved else "",
        "started_at": max(int(at) for _, at, _, _ in items),
        "completed_at": None,
        "prompt_tokens": None,
        "completion_tokens": None,
        "session": label,
        "title": title,
        "title_source": source,
        "outcome": None,
        "summary": None,  # made at its end
        "metadata": None,
        "events": int(count),
        "output_saved_at": saved[1] if saved else None,
    }
