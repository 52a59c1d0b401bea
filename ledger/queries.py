"""Read-only queries for operators. They run on reader connections, never the writer."""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from core.identity import DM_TEMPLATE, chain_to_root, resolve_label
from ledger.events import session_totals
from ledger.ingest import get_alias, get_session_ref
from ledger.live_turns import running_turn
from ledger.people import person
from ledger.port.errors import NotFound

OPEN = "('queued', 'running')"


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Sessions, open items (`queued`, and by status `items_<status>`) and replies not
    yet confirmed by their adapter (`unconfirmed`)."""
    sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
    out = {"sessions": int(sessions), "items_queued": 0, "items_running": 0}
    for status, n in conn.execute(
        f"SELECT status, count(*) FROM queue_items WHERE status IN {OPEN} GROUP BY status"
    ):
        out[f"items_{status}"] = int(n)
    out["queued"] = out["items_queued"] + out["items_running"]
    pending = conn.execute("SELECT count(*) FROM outbox WHERE status = 'pending'").fetchone()[0]
    out["unconfirmed"] = int(pending)
    return out


def sessions_list(conn: sqlite3.Connection, status: str | None, limit: int) -> list[dict[str, Any]]:
    sql = (
        "SELECT s.label, s.status, s.turns, s.parent_session, s.kind,"
        " (SELECT count(*) FROM queue_items q"
        f" WHERE q.session_label = s.label AND q.status IN {OPEN}), s.thread"
        " FROM sessions s WHERE s.updated_block >= 0"  # on its index, as ledger/console.py
    )
    args: list[Any] = []
    if status:
        sql += " AND s.status = ?"
        args.append(status)
    sql += " ORDER BY s.updated_block DESC, s.updated_at DESC, s.label LIMIT ?"  # ledger/recent.py
    args.append(limit)
    return [
        {
            "label": r[0],
            "status": r[1],
            "turns": r[2],
            "parent": r[3],
            "kind": r[4],
            "queued": r[5],
            "thread": r[6],  # the current thread's number (ledger/threads.py)
            "person": person(conn, r[0]),  # who it is with (ledger/people.py)
        }
        for r in conn.execute(sql, args).fetchall()
    ]


def resolve_for_show(conn: sqlite3.Connection, name: str) -> str:
    """A label names its own session even when merged; otherwise follow an alias."""
    if get_session_ref(conn, name) is not None:
        return name
    target = get_alias(conn, name)
    if target is None:
        raise NotFound(f"no session or alias {name!r}", field="session")
    return target


def session_show(conn: sqlite3.Connection, name: str, limit: int) -> dict[str, Any]:
    """`session.show`: a session (by label or alias), its queue and its thread."""
    label = resolve_for_show(conn, name)
    row = session_row(conn, label)
    return {
        "label": label,
        "kind": row["kind"],
        "status": row["status"],
        "merged_into": row["merged_into"],
        "persona": row["persona"],
        "parent": row["parent_session"],
        "parent_turn": row["parent_turn_id"],
        "origin": row["origin"],
        "title": row["title"],  # from the first message (core/titles.py), or the library's
        "slug": row["slug"],
        "extends": row["extends"],  # the closed session this one follows (ledger/closing.py)
        "ended_at": row["ended_at"],
        "closing_summary": row["closing_summary"],
        "system_prompt": system_prompt(conn, label),  # of its latest turn that gave one
        "model": row["model"],
        "events_seq": row["event_seq"],  # the session_seq of its latest event
        "aliases": aliases_of(conn, label),
        "person": person(conn, label),
        "head": row["head_turn_id"],
        "queued": queued_items(conn, label, limit),
        "turns": [
            *thread_turns(conn, row["head_turn_id"], limit),
            *filter(None, [running_turn(conn, label, row["head_turn_id"])]),  # listed last
        ],
        "totals": session_totals(conn, label),
    }


def session_row(conn: sqlite3.Connection, label: str) -> dict[str, Any]:
    cur = conn.execute("SELECT * FROM sessions WHERE label = ?", (label,))
    row = cur.fetchone()
    if row is None:
        raise NotFound(f"no session {label!r}", field="session")
    # By the column names, not sqlite3.Row: that takes only the sqlite3 module's
    # cursors, and an encrypted ledger's are SQLCipher's.
    return {d[0]: value for d, value in zip(cur.description, row, strict=True)}


def system_prompt(conn: sqlite3.Connection, label: str) -> str | None:
    row = conn.execute(
        "SELECT system_prompt FROM session_prompts WHERE session_label = ?", (label,)
    ).fetchone()
    return None if row is None else str(row[0])


def queue_override(conn: sqlite3.Connection, label: str) -> str | None:
    row = conn.execute("SELECT queue_override FROM sessions WHERE label = ?", (label,)).fetchone()
    if row is None:
        raise NotFound(f"no session {label!r}", field="session")
    return None if row[0] is None else str(row[0])


def aliases_of(conn: sqlite3.Connection, label: str) -> list[str]:
    return [
        str(r[0])
        for r in conn.execute(
            "SELECT alias FROM session_aliases WHERE session_label = ? ORDER BY alias", (label,)
        )
    ]


def queued_items(conn: sqlite3.Connection, label: str, limit: int) -> list[dict[str, Any]]:
    """Waiting and running items, then the latest dropped or cancelled ones."""
    rows = conn.execute(
        "SELECT q.id, q.seq, q.status, q.mode, q.source, q.reason, i.channel, i.msg_id,"
        " substr(coalesce(i.text, q.payload), 1, 120) FROM queue_items q"
        " LEFT JOIN inbound i ON i.id = q.inbound_id"
        f" WHERE q.session_label = ? AND q.status IN {OPEN} ORDER BY q.seq LIMIT ?",
        (label, limit),
    ).fetchall()
    dropped = conn.execute(
        "SELECT q.id, q.seq, q.status, q.mode, q.source, q.reason, i.channel, i.msg_id,"
        " substr(coalesce(i.text, q.payload), 1, 120) FROM queue_items q"
        " LEFT JOIN inbound i ON i.id = q.inbound_id"
        " WHERE q.session_label = ? AND q.status IN ('dropped', 'cancelled')"
        " ORDER BY q.seq DESC LIMIT ?",
        (label, limit),
    ).fetchall()
    keys = ("item", "seq", "status", "mode", "source", "reason", "channel", "msg_id", "preview")
    return [dict(zip(keys, r, strict=True)) for r in [*rows, *reversed(dropped)]]


def contact_show(conn: sqlite3.Connection, channel: str, sender_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT entity_id FROM contacts WHERE channel = ? AND sender_id = ?", (channel, sender_id)
    ).fetchone()
    if row is None:
        raise NotFound(f"no contact {sender_id!r} on channel {channel!r}", field="sender_id")
    entity = str(row[0])

    def parent(e: str) -> str | None:
        r = conn.execute("SELECT merged_into FROM entities WHERE id = ?", (e,)).fetchone()
        return None if r is None or r[0] is None else str(r[0])

    canonical = chain_to_root(entity, parent)[-1]
    resolved = resolve_label(
        DM_TEMPLATE.format(entity=canonical),
        lambda k: get_session_ref(conn, k),
        lambda a: get_alias(conn, a),
    )
    return {"entity": entity, "canonical": canonical, "session": resolved.label}


def thread_turns(conn: sqlite3.Connection, head: str | None, limit: int) -> list[dict[str, Any]]:
    """The turns from the root of a thread to `head`, at most the last `limit`."""
    if head is None:
        return []
    rows = conn.execute(
        "WITH RECURSIVE chain(id, depth) AS (SELECT ?, 0 UNION ALL"
        " SELECT t.parent_id, c.depth + 1 FROM turns t JOIN chain c ON t.id = c.id"
        " WHERE t.parent_id IS NOT NULL AND c.depth < ?)"
        " SELECT t.id, t.parent_id, t.type, t.status, t.reason, t.output, t.started_at,"
        " t.completed_at, t.prompt_tokens, t.completion_tokens, t.session_label, t.title,"
        " t.title_source, t.outcome, t.summary, t.metadata"
        " FROM chain c JOIN turns t ON t.id = c.id ORDER BY c.depth DESC",
        (head, limit - 1),
    ).fetchall()
    turn_ids = [r[0] for r in rows]
    inputs: dict[str, list[str]] = {t: [] for t in turn_ids}
    if turn_ids:
        marks = ",".join("?" * len(turn_ids))
        for turn_id, msg_id in conn.execute(
            f"SELECT turn_id, msg_id FROM messages WHERE turn_id IN ({marks}) AND role = 'user'"
            " ORDER BY turn_id, seq",
            turn_ids,
        ):
            if msg_id is not None:
                inputs[turn_id].append(msg_id)
    return [
        {
            "id": r[0],
            "parent": r[1],
            "type": r[2],
            "status": r[3],
            "reason": r[4],
            "inputs": inputs[r[0]],
            "output": r[5],
            "started_at": r[6],
            "completed_at": r[7],
            "prompt_tokens": r[8],
            "completion_tokens": r[9],
            "session": r[10],
            "title": r[11],
            "title_source": r[12],
            "outcome": r[13],
            "summary": None if r[14] is None else orjson.loads(r[14]),
            "metadata": None if r[15] is None else orjson.loads(r[15]),
        }
        for r in rows
    ]


def open_items_untouched_since(
    conn: sqlite3.Connection, cutoff_ms: int
) -> list[tuple[str, int, int]]:
    """Per session, its queued or running items last changed before `cutoff_ms`: (label,
    how many, when the oldest last changed). For `health`, which keeps the sessions no
    live actor holds (their items are stuck)."""
    rows = conn.execute(
        "SELECT session_label, count(*), min(updated_at) FROM queue_items"
        " WHERE status IN ('queued', 'running') AND updated_at < ? GROUP BY session_label"
        " ORDER BY session_label",  # not the engine's group order: a hash's on PostgreSQL
        (cutoff_ms,),
    ).fetchall()
    return [(str(label), int(n), int(oldest)) for label, n, oldest in rows]


def open_item_count(conn: sqlite3.Connection) -> int:
    """Queued or running items, all sessions (for `doctor` while the daemon is down)."""
    return int(
        conn.execute(
            "SELECT count(*) FROM queue_items WHERE status IN ('queued', 'running')"
        ).fetchone()[0]
    )
