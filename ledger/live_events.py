"""Turn events written while a turn runs and at its commit, and reactions to replies.

A turn's events are rows of `turn_events` keyed by (turn id, seq), each also numbered
within its session (`session_seq`: 1, 2, 3..., in the order the writer writes them, one
counter on the session row, so no two events of a session share a number and none is
skipped). Those written
while the turn runs (`write_events`, a writer job) come before its turn row, which
the commit or crash recovery writes later with the same id, so the rows are attached
from the start; the commit writes only the events not written yet
(`TurnRecord.events_written`). The seq numbers come from the turn
(core/turn_events.py): a write never numbers events itself, so writes that carry a
turn's events in any grouping give the same rows.

A turn whose `file` events changed files ends with a `snapshot` event: each path it
changed and its hash after the turn, and one hash over that list, so two turns that
left the same files agree on it. A reaction to a reply becomes a `feedback` event of
the turn that made the reply, once per (channel, msg_id); a reply no turn made is
NotFound and nothing is written.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from typing import Any

import orjson

from core.turn_events import modified_paths
from ledger.port.errors import NotFound
from ledger.snapshots import record_events

Event = tuple[str, dict[str, Any]]


def write_events(
    conn: sqlite3.Connection,
    turn_id: str,
    session: str,
    parent_id: str | None,
    first_seq: int,
    events: Sequence[Event],
    now: int,
    max_bytes: int | None = None,
    session_seq: int | None = None,
) -> None:
    """Write `events` as the turn's events from `first_seq` on. Their
    `file` contents go to blobs (ledger/snapshots.py). `session_seq`: the first of
    the session sequence numbers they take, taken by the caller already."""
    rows = record_events(conn, turn_id, session, parent_id, events, max_bytes, now, first_seq)
    first = session_seq if session_seq is not None else take_session_seqs(conn, session, len(rows))
    conn.executemany(
        "INSERT INTO turn_events (turn_id, seq, session_label, type, payload, created_at,"
        " session_seq) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                turn_id,
                seq,
                session,
                kind,
                orjson.dumps(payload, default=str).decode(),
                now,
                None if first is None else first + n,
            )
            for n, (seq, (kind, payload)) in enumerate(enumerate(rows, first_seq))
        ],
    )


def take_session_seqs(conn: sqlite3.Connection, session: str, count: int) -> int | None:
    """The first of `count` session sequence numbers taken for new events of `session`
    (the next ones after its last, in the writer's transaction: gapless and increasing
    across restarts); None when the session has no row."""
    if count == 0:
        return None
    row = conn.execute(
        "UPDATE sessions SET event_seq = event_seq + ? WHERE label = ? RETURNING event_seq",
        (count, session),
    ).fetchone()
    return None if row is None else int(row[0]) - count + 1


def modified(events: Sequence[Event]) -> set[str]:
    """The paths the events modified; with any, the turn ends with a snapshot event."""
    if not any(kind == "file" for kind, _ in events):
        return set()  # the common case, without a look at any payload
    return modified_paths(events)


def commit_events(
    conn: sqlite3.Connection,
    turn_id: str,
    session: str,
    parent_id: str | None,
    events: Sequence[Event],
    written: int,
    now: int,
    max_bytes: int | None,
    session_seq: int | None = None,
) -> None:
    """At a turn's commit: its events not written yet, then its snapshot event.
    `session_seq`: the first session sequence number they take, the commit having
    taken one for each and one for the snapshot if `modified` finds paths."""
    rest = events[written:]
    if rest:
        write_events(conn, turn_id, session, parent_id, written, rest, now, max_bytes, session_seq)
    after = None if session_seq is None else session_seq + len(rest)
    paths = modified(events)
    snapshot = snapshot_payload(conn, turn_id) if paths else None
    if snapshot is not None:
        write_events(
            conn, turn_id, session, None, len(events), [("snapshot", snapshot)], now, None, after
        )
    elif paths and after is not None:  # its number was taken, but no file was kept
        conn.execute("UPDATE sessions SET event_seq = event_seq - 1 WHERE label = ?", (session,))


def set_title(conn: sqlite3.Connection, turn_id: str, title: str, source: str) -> bool:
    """A title written after the turn replaces only a mechanical one."""
    cur = conn.execute(
        "UPDATE turns SET title = ?, title_source = ? WHERE id = ?"
        " AND coalesce(title_source, 'mechanical') = 'mechanical'",
        (title, source, turn_id),
    )
    return cur.rowcount == 1


def written_events(conn: sqlite3.Connection, turn_id: str) -> list[Event]:
    """The events of a turn in the ledger, in order (for crash recovery's totals)."""
    return [
        (str(kind), orjson.loads(payload))
        for kind, payload in conn.execute(
            "SELECT type, payload FROM turn_events WHERE turn_id = ? ORDER BY seq", (turn_id,)
        )
    ]


def snapshot_payload(conn: sqlite3.Connection, turn_id: str) -> dict[str, Any] | None:
    """The files the turn changed as they are after it; None if it changed none."""
    rows = conn.execute(
        "SELECT path, op, sha256, bytes FROM file_snapshots f WHERE turn_id = ?"
        " AND seq = (SELECT max(seq) FROM file_snapshots g WHERE g.turn_id = f.turn_id"
        " AND g.path = f.path) ORDER BY path",
        (turn_id,),
    ).fetchall()
    if not rows:
        return None
    files = [{"path": p, "op": op, "sha256": sha, "bytes": size} for p, op, sha, size in rows]
    listing = "\n".join(f"{p}\t{sha or '-'}" for p, _, sha, _ in rows)
    return {
        "by": "broker",
        "snapshot_type": "turn_end",
        "files_changed": len(files),
        "files": files,
        "tree_sha256": hashlib.sha256(listing.encode()).hexdigest(),
    }


def new_files(conn: sqlite3.Connection, session: str, turn_id: str, paths: set[str]) -> int:
    """How many of `paths` no other turn of the session modified before: the turn's
    share of the session's distinct files modified."""
    return sum(
        1
        for path in paths
        if conn.execute(
            "SELECT 1 FROM file_snapshots WHERE path = ? AND session_label = ? AND turn_id != ?"
            " AND op IN ('write', 'edit', 'create', 'delete') LIMIT 1",
            (path, session, turn_id),
        ).fetchone()
        is None
    )


def add_feedback(
    conn: sqlite3.Connection,
    channel: str,
    out_id: str,
    msg_id: str,
    sender_id: str,
    reaction: str,
    text: str,
    now: int,
) -> tuple[str, str, bool]:
    """(session, turn, duplicate) of the feedback event for a reaction."""
    row = conn.execute(
        "SELECT session_label, turn_id FROM outbox WHERE out_id = ? AND channel = ?",
        (out_id, channel),
    ).fetchone()
    if row is None or row[1] is None:
        raise NotFound(f"no reply {out_id!r} of a turn on channel {channel!r}", field="reply_to")
    session, turn_id = str(row[0]), str(row[1])
    seen = conn.execute(
        "SELECT 1 FROM turn_events WHERE turn_id = ? AND type = 'feedback'"
        " AND payload ->> '$.channel' = ? AND payload ->> '$.msg_id' = ?",
        (turn_id, channel, msg_id),
    ).fetchone()
    if seen is not None:
        return session, turn_id, True
    (seq,) = conn.execute(
        "SELECT coalesce(max(seq), -1) + 1 FROM turn_events WHERE turn_id = ?", (turn_id,)
    ).fetchone()
    payload = {
        "by": "person",
        "reaction": reaction,
        "text": text,
        "out_id": out_id,
        "channel": channel,
        "msg_id": msg_id,
        "sender": sender_id,
    }
    write_events(conn, turn_id, session, None, int(seq), [("feedback", payload)], now)
    conn.execute("UPDATE sessions SET total_events = total_events + 1 WHERE label = ?", (session,))
    return session, turn_id, False
