"""The web console's reads: a page of sessions, a session's turn tree, one turn whole.

Every function here runs on a reader connection, never the writer, and reads
a bounded number of rows (a page, the latest turns of a session, one turn's
events and files), so a console on a large ledger costs its readers what one
page shows. The SQL is the portable subset both ledgers speak.
"""

from __future__ import annotations

import difflib
import sqlite3
from typing import Any

import orjson

from ledger.people import person
from ledger.port.errors import NotFound
from ledger.snapshots import blob

# The page's rows are picked first, on the index of the order (`sessions_recent`, by the
# block of time a session changed in: ledger/recent.py), so a page reads its own rows
# and those before it, sorting only the blocks it reads, never every session; the joins
# and the counts are then made for those rows alone. The range on the block, always true
# (no block is negative), is what makes SQLite's planner read that index, not sort.
SESSIONS_PAGE = (
    "SELECT s.label, s.kind, s.status, s.turns, s.parent_session, s.entity_id,"
    " e.name, s.updated_at, s.title, e.merged_into,"
    " (SELECT count(*) FROM queue_items q"
    "  WHERE q.session_label = s.label AND q.status IN ('queued', 'running'))"
    " FROM (SELECT label FROM sessions WHERE updated_block >= 0"
    "  ORDER BY updated_block DESC, updated_at DESC, label"
    "  LIMIT ? OFFSET ?) p"
    " JOIN sessions s ON s.label = p.label LEFT JOIN entities e ON e.id = s.entity_id"
    " ORDER BY s.updated_at DESC, s.label"
)
SESSION_TURNS = (  # a session's latest turns, on `turns_session`
    "SELECT id, parent_id, type, status, reason, title, outcome, started_at, completed_at,"
    " prompt_tokens, completion_tokens, model FROM turns WHERE session_label = ?"
    " ORDER BY started_at DESC, id DESC LIMIT ?"
)
DIFF_BYTES = 256 << 10  # a file version larger than this is not diffed
PREVIEW_CHARS = 200


def _preview(text: str | None) -> str:
    if text is None:
        return ""
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"


def sessions_page(conn: sqlite3.Connection, limit: int, offset: int) -> list[dict[str, Any]]:
    """Sessions, the latest changed first, with their person's name and channels."""
    rows = conn.execute(SESSIONS_PAGE, (limit, offset)).fetchall()
    people = _contacts(conn, {str(r[5]) for r in rows if r[5]})
    out = []
    for label, kind, status, turns, parent, entity, name, updated, title, merged, queued in rows:
        contacts = people.get(entity, []) if entity else []
        if kind == "group" and not contacts:
            parts = str(label).split(":", 2)
            contacts = [(parts[1], parts[2])] if len(parts) == 3 else []
        shown = name or next((n for _, n in contacts if n), None)
        if kind != "group" and (kind != "dm" or merged is not None):
            # A fork's or worker's person, or one merged into another: as `sessions` names them.
            shown, channels = _person(conn, str(label))
            contacts = [(c, "") for c in channels]
        out.append(
            {
                "label": label,
                "kind": kind,
                "status": status,
                "turns": turns,
                "parent": parent,
                "person": shown,
                "channels": sorted({channel for channel, _ in contacts}),
                "updated_at": updated,
                "title": title,
                "queued": queued,
            }
        )
    return out


def _person(conn: sqlite3.Connection, label: str) -> tuple[str | None, list[str]]:
    """The name and channels of the person `label` is with (ledger/people.py)."""
    found = person(conn, label)
    if found is None:
        return None, []
    return found["name"], sorted({c.split(":", 1)[0] for c in found["channels"]})


def _contacts(conn: sqlite3.Connection, entities: set[str]) -> dict[str, list[tuple[str, str]]]:
    """Entity -> (channel, display name or sender id) of its contacts and of those merged
    into it."""
    if not entities:
        return {}
    marks = ",".join("?" * len(entities))
    args = [*entities, *entities]
    found: dict[str, list[tuple[str, str]]] = {}
    # Two indexed lookups (contacts by entity, entities by what they merged into), not
    # one OR that would scan the join.
    for entity, channel, shown in conn.execute(
        "SELECT c.entity_id, c.channel, coalesce(c.display_name, c.sender_id)"
        f" FROM contacts c WHERE c.entity_id IN ({marks})"
        " UNION ALL"
        " SELECT e.merged_into, c.channel, coalesce(c.display_name, c.sender_id)"
        f" FROM entities e JOIN contacts c ON c.entity_id = e.id WHERE e.merged_into IN ({marks})"
        " ORDER BY 2, 3",
        args,
    ):
        found.setdefault(str(entity), []).append((str(channel), str(shown)))
    return found


def session_tree(conn: sqlite3.Connection, label: str, limit: int) -> dict[str, Any]:
    """A session's latest `limit` turns with their parents (a tree: forks included, the
    turns other sessions forked from marked), its open items and its head."""
    row = conn.execute(
        "SELECT s.label, s.kind, s.status, s.head_turn_id, s.parent_session, s.parent_turn_id,"
        " s.entity_id, e.name, s.title, s.turns"
        " FROM sessions s LEFT JOIN entities e ON e.id = s.entity_id WHERE s.label = ?",
        (label,),
    ).fetchone()
    if row is None:
        raise NotFound(f"no session {label!r}", field="session")
    turns = conn.execute(SESSION_TURNS, (label, limit)).fetchall()
    forks = conn.execute(
        "SELECT label, parent_turn_id, kind FROM sessions WHERE parent_session = ?"
        " ORDER BY created_at LIMIT 1000",
        (label,),
    ).fetchall()
    items = conn.execute(
        "SELECT q.id, q.status, q.source, q.mode, q.created_at, i.text, q.payload"
        " FROM queue_items q LEFT JOIN inbound i ON i.id = q.inbound_id"
        " WHERE q.session_label = ? AND q.status IN ('queued', 'running') ORDER BY q.seq"
        " LIMIT 200",
        (label,),
    ).fetchall()
    name, channels = _person(conn, label)
    return {
        "label": row[0],
        "kind": row[1],
        "status": row[2],
        "head": row[3],
        "parent": row[4],
        "parent_turn": row[5],
        "person": name,
        "channels": channels,
        "title": row[8],
        "turn_count": row[9],
        "entity": row[6],
        "turns": [
            {
                "id": t[0],
                "parent": t[1],
                "type": t[2],
                "status": t[3],
                "reason": t[4],
                "title": t[5],
                "outcome": t[6],
                "started_at": t[7],
                "completed_at": t[8],
                "prompt_tokens": t[9],
                "completion_tokens": t[10],
                "model": t[11],
            }
            for t in reversed(turns)
        ],
        "forks": [{"label": f[0], "turn": f[1], "kind": f[2]} for f in forks],
        "queued": [
            {
                "id": i[0],
                "status": i[1],
                "source": i[2],
                "mode": i[3],
                "created_at": i[4],
                "text": _preview(i[5] if i[5] is not None else i[6]),
            }
            for i in items
        ],
    }


def turn_detail(conn: sqlite3.Connection, label: str, turn_id: str) -> dict[str, Any]:
    """One turn of `label`: its messages, its events, and its files with their diffs."""
    row = conn.execute(
        "SELECT id, parent_id, type, status, reason, error, title, outcome, started_at,"
        " completed_at, prompt_tokens, completion_tokens, model, engine"
        " FROM turns WHERE id = ? AND session_label = ?",
        (turn_id, label),
    ).fetchone()
    if row is None:
        raise NotFound(f"no turn {turn_id!r} in {label!r}", field="turn")
    keys = [
        "id",
        "parent",
        "type",
        "status",
        "reason",
        "error",
        "title",
        "outcome",
        "started_at",
        "completed_at",
        "prompt_tokens",
        "completion_tokens",
        "model",
        "engine",
    ]
    out: dict[str, Any] = dict(zip(keys, row, strict=True))
    out["messages"] = [
        {"role": r, "sender": s, "content": c}
        for r, s, c in conn.execute(
            "SELECT role, sender_id, content FROM messages WHERE turn_id = ? ORDER BY seq"
            " LIMIT 500",
            (turn_id,),
        )
    ]
    out["events"] = [
        {"seq": seq, "type": kind, "data": orjson.loads(payload)}
        for seq, kind, payload in conn.execute(
            "SELECT seq, type, payload FROM turn_events WHERE turn_id = ? ORDER BY seq LIMIT 500",
            (turn_id,),
        )
    ]
    out["files"] = [
        {
            "path": path,
            "op": op,
            "bytes": size,
            "note": note,
            "diff": _diff(conn, path, before, after) if stored else None,
        }
        for path, op, before, after, size, stored, note in conn.execute(
            "SELECT path, op, before_sha256, sha256, bytes, stored, note FROM file_snapshots"
            " WHERE turn_id = ? ORDER BY seq LIMIT 100",
            (turn_id,),
        )
    ]
    return out


def _diff(conn: sqlite3.Connection, path: str, before: str | None, after: str | None) -> str:
    def text(digest: str | None) -> list[str] | None:
        if digest is None:
            return []
        data = blob(conn, digest)
        if data is None or len(data) > DIFF_BYTES:
            return None
        return data.decode("utf-8", errors="replace").splitlines(keepends=True)

    old, new = text(before), text(after)
    if old is None or new is None:
        return "(not shown: a version is too large or was not stored)"
    return "".join(difflib.unified_diff(old, new, f"a/{path}", f"b/{path}"))
