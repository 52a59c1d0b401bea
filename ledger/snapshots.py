"""File snapshots by content: blobs stored once by sha256, one row per `file` event.

A turn's `file` events are recorded in its own transaction (`record_events`, called by
ledger/turns.py): each distinct content once in `blobs` (zlib), and a `file_snapshots`
row with the path, op, before-hash and after-hash; the event row keeps path, op and
hashes, never the content, so no content is stored twice. Nothing is silently
dropped: a content over `max_bytes` is recorded by hash and size with a note (`stored`
0), and an event the core finds bad (core/snapshots.py) keeps its problem in the
event row and stores no content. A blob goes only by an explicit `gc`, and only when
no snapshot names it, as its after- or its before-hash.

The file after turn T is the latest snapshot of its path at T or above it on T's
thread (`latest`), so a fork shares its ancestors' snapshots without a copy. The walk
up stops at the first turn that touched the path, and is not taken when no session
the thread runs through ever touched it.
"""

from __future__ import annotations

import base64
import hashlib
import sqlite3
import zlib
from collections.abc import Iterable
from typing import Any

from core.snapshots import event_content, file_event_problem, normal_path, shown
from ledger.port.errors import NotFound
from ledger.queries import resolve_for_show

DEFAULT_MAX_BYTES = 8 << 20
_max_bytes = DEFAULT_MAX_BYTES  # this process's limit: the writer's, set by `configure`
# Compression runs inside the writer's transaction, where every session's acks
# wait behind it: level 1 is far quicker than the default for a third more bytes
# (docs/performance.md, bench/snapshots.py).
ZLIB_LEVEL = 1
NO_CONTENT = "the engine reported no content for this change"
SNAPSHOT_COLUMNS = "turn_id, seq, op, before_sha256, sha256, bytes, stored, note"


def configure(conn: sqlite3.Connection, max_bytes: int) -> None:
    """A writer job: contents over `max_bytes` are kept by hash only from the next
    job on, whoever submits the turns."""
    global _max_bytes
    _max_bytes = max_bytes


def over_size_note(size: int, max_bytes: int) -> str:
    return (
        f"the content ({size} bytes) is over snapshots.max_bytes ({max_bytes});"
        " only its hash and size are kept"
    )


def put_blob(conn: sqlite3.Connection, content: bytes, now: int) -> str:
    """Store `content` once; its sha256."""
    digest = hashlib.sha256(content).hexdigest()
    if conn.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (digest,)).fetchone() is None:
        conn.execute(
            "INSERT INTO blobs (sha256, bytes, data, created_at) VALUES (?, ?, ?, ?)",
            (digest, len(content), zlib.compress(content, ZLIB_LEVEL), now),
        )
    return digest


def blob(conn: sqlite3.Connection, digest: str) -> bytes | None:
    row = conn.execute("SELECT data FROM blobs WHERE sha256 = ?", (digest,)).fetchone()
    return None if row is None else zlib.decompress(row[0])


def record_events(
    conn: sqlite3.Connection,
    turn_id: str,
    session: str,
    parent_id: str | None,
    events: Iterable[tuple[str, dict[str, Any]]],
    max_bytes: int | None,
    now: int,
    first_seq: int = 0,
) -> list[tuple[str, dict[str, Any]]]:
    """The events as their rows keep them: each `file` event's content goes to
    `blobs` and its snapshot row; its payload keeps path, op and hashes.
    `max_bytes` None: the limit `configure` set. `first_seq` > 0: the turn's
    earlier events were written already, while it ran (ledger/events.py)."""
    limit = _max_bytes if max_bytes is None else max_bytes
    out: list[tuple[str, dict[str, Any]]] = []
    after: dict[str, str | None] = {}  # a path's hash after this turn's earlier events
    for seq, (kind, data) in enumerate(events, first_seq):
        if kind == "snapshot" and data.get("snapshot_type") == "turn_start" and "files" not in data:
            out.append((kind, {**data, **known_files(conn, parent_id)}))
            continue
        if kind != "file":
            out.append((kind, data))
            continue
        problem = file_event_problem(data)
        if problem is not None:
            out.append(("file", _bad_event(data, problem)))
            continue
        path = normal_path(data["path"])
        if path in after:
            before = after[path]
        elif first_seq and (mine := _own_latest(conn, turn_id, path)) is not None:
            before = mine[0]
        else:
            found = latest(conn, parent_id, path) if parent_id is not None else None
            before = found["sha256"] if found is not None else None
        content = event_content(data)
        digest, size, stored, note = None, None, False, None
        if content is not None:
            size = len(content)
            if size > limit:
                digest, note = hashlib.sha256(content).hexdigest(), over_size_note(size, limit)
            else:
                digest, stored = put_blob(conn, content, now), True
        elif data["op"] != "delete":
            note = NO_CONTENT
        conn.execute(
            "INSERT INTO file_snapshots (turn_id, seq, session_label, path, op, before_sha256,"
            " sha256, bytes, stored, note) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (turn_id, seq, session, path, data["op"], before, digest, size, int(stored), note),
        )
        after[path] = digest
        payload = {k: v for k, v in data.items() if k not in ("content", "content_b64")}
        payload.update(path=path, before=before, sha256=digest, bytes=size, stored=stored)
        if note is not None:
            payload["note"] = note
        out.append(("file", payload))
    return out


def _own_latest(conn: sqlite3.Connection, turn_id: str, path: str) -> tuple[str | None] | None:
    """The hash after the latest of the turn's own events already written, if any."""
    row = conn.execute(
        "SELECT sha256 FROM file_snapshots WHERE turn_id = ? AND path = ? ORDER BY seq DESC"
        " LIMIT 1",
        (turn_id, path),
    ).fetchone()
    return None if row is None else (row[0],)


def _bad_event(data: Any, problem: str) -> dict[str, Any]:
    """What the event row keeps of a bad `file` event: no content."""
    payload: dict[str, Any] = {"problem": problem, "stored": False}
    if isinstance(data, dict):
        for key in ("path", "op"):
            if isinstance(value := data.get(key), str):
                payload[key] = value[:1000]
    return payload


def _lineage(conn: sqlite3.Connection, turn_id: str) -> list[str]:
    """The sessions whose turns the thread up from `turn_id` runs through: the
    turn's own, then each session it was forked from."""
    row = conn.execute("SELECT session_label FROM turns WHERE id = ?", (turn_id,)).fetchone()
    out: list[str] = []
    label = row[0] if row is not None else None
    while label is not None and label not in out:
        out.append(label)
        row = conn.execute(
            "SELECT parent_session FROM sessions WHERE label = ? AND origin = 'fork'", (label,)
        ).fetchone()
        label = row[0] if row is not None else None
    return out


def _touched(conn: sqlite3.Connection, turn_id: str, path: str) -> bool:
    sessions = _lineage(conn, turn_id)
    marks = ",".join("?" * len(sessions))
    return bool(
        sessions
        and conn.execute(
            f"SELECT 1 FROM file_snapshots WHERE path = ? AND session_label IN ({marks}) LIMIT 1",
            (path, *sessions),
        ).fetchone()
    )


def latest(conn: sqlite3.Connection, turn_id: str, path: str) -> dict[str, Any] | None:
    """The latest snapshot of `path` at `turn_id` or above it, or None."""
    if _touched(conn, turn_id, path):
        row = conn.execute(
            "WITH RECURSIVE chain(id, hit) AS ("
            " SELECT ?1, EXISTS (SELECT 1 FROM file_snapshots WHERE turn_id = ?1 AND path = ?2)"
            " UNION ALL SELECT t.parent_id, EXISTS (SELECT 1 FROM file_snapshots f"
            " WHERE f.turn_id = t.parent_id AND f.path = ?2)"
            " FROM chain c JOIN turns t ON t.id = c.id WHERE NOT c.hit AND t.parent_id IS NOT NULL)"
            " SELECT id FROM chain WHERE hit LIMIT 1",
            (turn_id, path),
        ).fetchone()
        if row is not None:
            return _snapshot(
                conn.execute(
                    f"SELECT {SNAPSHOT_COLUMNS} FROM file_snapshots WHERE turn_id = ? AND path = ?"
                    " ORDER BY seq DESC LIMIT 1",
                    (row[0], path),
                ).fetchone()
            )
    return None


def _snapshot(row: tuple[Any, ...]) -> dict[str, Any]:
    keys = ("turn", "seq", "op", "before", "sha256", "bytes", "stored", "note")
    out = dict(zip(keys, row, strict=True))
    out["stored"] = bool(out["stored"])
    return out


def _head(conn: sqlite3.Connection, name: str) -> tuple[str, str | None]:
    label = resolve_for_show(conn, name)
    row = conn.execute("SELECT head_turn_id FROM sessions WHERE label = ?", (label,)).fetchone()
    return label, (row[0] if row else None)


def _thread_rows(conn: sqlite3.Connection, head: str, path: str | None) -> list[tuple[Any, ...]]:
    """The snapshots on the thread up to `head` (of one path, or all), oldest first."""
    where = " AND f.path = ?2" if path is not None else ""
    return conn.execute(
        "WITH RECURSIVE chain(id, depth) AS (SELECT ?1, 0 UNION ALL"
        " SELECT t.parent_id, c.depth + 1 FROM turns t JOIN chain c ON t.id = c.id"
        " WHERE t.parent_id IS NOT NULL)"
        f" SELECT f.path, {', '.join('f.' + c for c in SNAPSHOT_COLUMNS.split(', '))}"
        f" FROM chain c JOIN file_snapshots f ON f.turn_id = c.id{where}"
        " ORDER BY c.depth DESC, f.seq",
        (head, path) if path is not None else (head,),
    ).fetchall()


def _last_changes(conn: sqlite3.Connection, head: str | None) -> dict[str, dict[str, Any]]:
    """Each path the thread up to `head` touched, with its latest change, in the order
    of those latest changes (a path changed again moves to the end)."""
    last: dict[str, dict[str, Any]] = {}
    for row in _thread_rows(conn, head, None) if head is not None else []:
        last.pop(row[0], None)
        last[row[0]] = _snapshot(row[1:])
    return last


def known_files(conn: sqlite3.Connection, head: str | None) -> dict[str, Any]:
    """The files the thread up to `head` knows, each as its latest change left it (a
    turn-start snapshot's `files`), and one hash over that list (`tree_sha256`), so two
    turns that start from the same files agree on it."""
    last = _last_changes(conn, head)
    files = [
        {"path": p, "op": c["op"], "sha256": c["sha256"], "bytes": c["bytes"]}
        for p, c in sorted(last.items())
    ]
    listing = "\n".join(f"{f['path']}\t{f['sha256'] or '-'}" for f in files)
    return {
        "files": files,
        "tracked_files": sum(1 for f in files if f["op"] != "delete"),
        "tree_sha256": hashlib.sha256(listing.encode()).hexdigest(),
    }


def history(conn: sqlite3.Connection, name: str, path: str) -> list[dict[str, Any]]:
    """`file.history`: every change of `path` on the session's thread, in order."""
    label, head = _head(conn, name)
    rows = _thread_rows(conn, head, normal_path(path)) if head is not None else []
    if not rows:
        raise NotFound(f"the thread of {label} never touched {path!r}", field="path")
    return [_snapshot(r[1:]) for r in rows]


def files(conn: sqlite3.Connection, name: str) -> list[dict[str, Any]]:
    """`file.list`: each path the session's thread touched, with its latest change."""
    _label, head = _head(conn, name)
    return [{"path": path, **change} for path, change in _last_changes(conn, head).items()]


def at(conn: sqlite3.Connection, name: str, path: str, turn: str | None) -> dict[str, Any]:
    """`file.at`: the file as it was after `turn` (default: the head), found up its thread."""
    label, head = _head(conn, name)
    path = normal_path(path)
    if turn is None:
        if head is None:
            raise NotFound(f"{label} has no turns", field="session")
        turn = head
    elif conn.execute("SELECT 1 FROM turns WHERE id = ?", (turn,)).fetchone() is None:
        raise NotFound(f"no turn {turn!r}", field="turn")
    found = latest(conn, turn, path)
    if found is None or found["op"] == "delete":
        gone = "never existed" if found is None else f"was deleted by turn {found['turn']}"
        raise NotFound(f"{path!r} {gone} as of turn {turn}", field="path")
    out: dict[str, Any] = {
        "path": path,
        "turn": turn,
        "changed_in": found["turn"],
        "op": found["op"],
        "sha256": found["sha256"],
        "bytes": found["bytes"],
        "stored": found["stored"],
    }
    if found["stored"]:
        content = blob(conn, found["sha256"])
        if content is None:  # only `gc` removes a blob; a damaged file is the only way here
            raise NotFound(f"the content {found['sha256']} is missing", field="path")
        out.update(shown(content))
    else:
        out["note"] = found["note"]
    return out


def gc(conn: sqlite3.Connection) -> dict[str, int]:
    """Remove the blobs no snapshot names: how many, and the bytes freed."""
    named = (
        "SELECT sha256 FROM file_snapshots WHERE sha256 IS NOT NULL"
        " UNION SELECT before_sha256 FROM file_snapshots WHERE before_sha256 IS NOT NULL"
    )
    blobs, freed = conn.execute(
        f"SELECT count(*), coalesce(sum(length(data)), 0) FROM blobs WHERE sha256 NOT IN ({named})"
    ).fetchone()
    if blobs:
        conn.execute(f"DELETE FROM blobs WHERE sha256 NOT IN ({named})")
    return {"blobs": int(blobs), "bytes": int(freed)}


# -- export and import (ledger/sessions.py) ---------------------------------------

FILE_COLUMNS = ("seq", "path", "op", "before_sha256", "sha256", "bytes", "stored", "note")


def turn_files(conn: sqlite3.Connection, turn_id: str) -> list[dict[str, Any]]:
    """A turn's snapshot rows, as an export's turn line carries them."""
    return [
        dict(zip(FILE_COLUMNS, r, strict=True))
        for r in conn.execute(
            f"SELECT {', '.join(FILE_COLUMNS)} FROM file_snapshots WHERE turn_id = ? ORDER BY seq",
            (turn_id,),
        )
    ]


def blob_line(conn: sqlite3.Connection, digest: str) -> dict[str, Any]:
    """An export's line for one blob: its compressed bytes in base64."""
    size, data = conn.execute(
        "SELECT bytes, data FROM blobs WHERE sha256 = ?", (digest,)
    ).fetchone()
    return {
        "type": "blob",
        "sha256": digest,
        "bytes": size,
        "zlib_b64": base64.b64encode(data).decode(),
    }


def load_blob_line(conn: sqlite3.Connection, line: dict[str, Any], now: int) -> str:
    """Store a blob line of an export once its content matches its hash; ValueError if not."""
    try:
        content = zlib.decompress(base64.b64decode(line["zlib_b64"], validate=True))
    except (KeyError, TypeError, ValueError, zlib.error) as exc:
        raise ValueError(f"a blob line without a readable zlib_b64 ({exc})") from exc
    digest = put_blob(conn, content, now)
    if digest != line.get("sha256"):
        raise ValueError(f"a blob whose content does not match its sha256 {line.get('sha256')!r}")
    return digest


def insert_files(
    conn: sqlite3.Connection, turn_id: str, session: str, files: list[dict[str, Any]]
) -> None:
    """An imported turn's snapshot rows; ValueError when one names a blob not stored."""
    for f in files:
        if (
            f["stored"]
            and not conn.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (f["sha256"],)).fetchone()
        ):
            raise ValueError(f"the snapshot of {f['path']!r} names blob {f['sha256']}, not given")
        conn.execute(
            "INSERT INTO file_snapshots (turn_id, session_label, "
            f"{', '.join(FILE_COLUMNS)}) VALUES (?, ?, {', '.join('?' * len(FILE_COLUMNS))})",
            (turn_id, session, *(f[c] for c in FILE_COLUMNS)),
        )
