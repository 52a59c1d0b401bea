"""The context load: a session's thread as the context needs it
(`Ledger.session_start` runs it for the port).

The thread loaded is exactly the turns after the latest compaction boundary (the kept
turns of that compaction and every turn since), at most `MAX_LOAD_TURNS` of them.
Inputs of aborted turns run again elsewhere and are left out, while an aborted turn's
partial reply stays; the same holds in every read of the ledger. A compaction keeping
turns an earlier compaction had kept walks through that earlier compaction turn,
whose summary is left out, merged into the later one. The state record is the
head's (ledger/state_records.py): the thread's own, never another thread's of the
same session.
"""

from __future__ import annotations

import sqlite3

import orjson

from core.engine_types import Role
from core.turn_summary import render
from ledger.port.records import StoredTurn, Thread
from ledger.state_records import state_at

MAX_LOAD_TURNS = 5000  # a thread longer than this without a compaction loads its newest part


def load_thread(conn: sqlite3.Connection, head: str) -> Thread:
    state = state_at(conn, head)
    chain = conn.execute(
        "WITH RECURSIVE chain(id, depth) AS (SELECT ?, 0 UNION ALL"
        " SELECT t.parent_id, c.depth + 1 FROM turns t JOIN chain c ON t.id = c.id"
        " WHERE t.parent_id IS NOT NULL AND t.type != 'compaction' AND c.depth < ?)"
        " SELECT t.id, t.type, t.status FROM chain c JOIN turns t ON t.id = c.id"
        " ORDER BY c.depth",
        (head, MAX_LOAD_TURNS),
    ).fetchall()
    summary = None
    turns: list[tuple[str, str]] = []  # (id, status), newest first, up to a compaction
    for turn_id, kind, status in chain:
        if kind == "compaction":
            row = conn.execute(
                "SELECT summary, first_kept_turn_id FROM compactions WHERE turn_id = ?",
                (turn_id,),
            ).fetchone()
            if row is not None:
                summary = str(row[0])
                turns += _kept_turns(conn, turn_id, row[1])
            break
        turns.append((str(turn_id), str(status)))
    shown = _summaries(conn, [t for t, _ in turns])
    stored = [
        StoredTurn(t, _messages(conn, t, status), shown.get(t)) for t, status in reversed(turns)
    ]
    return Thread(summary, stored, state)


def _summaries(conn: sqlite3.Connection, turn_ids: list[str]) -> dict[str, str]:
    """The turns' summaries as a summary-mode context shows them, by turn id (those
    that have one)."""
    out: dict[str, str] = {}
    for start in range(0, len(turn_ids), 500):
        part = turn_ids[start : start + 500]
        for turn_id, title, summary in conn.execute(
            f"SELECT id, title, summary FROM turns WHERE id IN ({','.join('?' * len(part))})"
            " AND summary IS NOT NULL",
            part,
        ):
            out[str(turn_id)] = render(title, orjson.loads(summary))
    return out


def _kept_turns(
    conn: sqlite3.Connection, compaction: str, first_kept: str | None
) -> list[tuple[str, str]]:
    """The turns a compaction kept verbatim: from its parent back to `first_kept`,
    but for compaction turns."""
    if first_kept is None:
        return []
    rows = conn.execute(
        "WITH RECURSIVE chain(id, depth) AS ("
        " SELECT parent_id, 0 FROM turns WHERE id = ? UNION ALL"
        " SELECT t.parent_id, c.depth + 1 FROM turns t JOIN chain c ON t.id = c.id"
        " WHERE c.id != ? AND t.parent_id IS NOT NULL AND c.depth < ?)"
        " SELECT t.id, t.status, t.type FROM chain c JOIN turns t ON t.id = c.id"
        " ORDER BY c.depth",
        (compaction, first_kept, MAX_LOAD_TURNS),
    ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows if r[2] != "compaction"]  # summary merged later


def hidden(status: str, role: str) -> bool:
    """Whether a message of a turn of `status` is left out of the thread: an
    aborted turn's inputs, which ran again in a later turn."""
    return status == "aborted" and role == "user"


def _messages(
    conn: sqlite3.Connection, turn_id: str, status: str
) -> list[tuple[Role, str, int | None]]:
    out = []
    for role, content, tokens in conn.execute(
        "SELECT role, content, tokens FROM messages WHERE turn_id = ? ORDER BY seq",
        (turn_id,),
    ):
        if hidden(status, role):
            continue
        out.append((role, content, int(tokens) if tokens is not None else None))
    return out
