"""What Google ADK's `LedgerSessionService` (ledger/integrations/adk/) keeps in the
ledger: jobs for the one writer (functions of a connection and plain arguments,
ledger/writer/jobs.py) and reads of a read connection, run by the in-process Store
or by a daemon (served.py: the `adk.*` calls). Nothing here knows ADK's classes,
so a daemon without ADK installed serves them; the service turns them into these
plain values.

An ADK session is a ledger session labelled `adk:<app>:<user>:<id>`, each part
percent-quoted: the label is one to one with the triple, and an app's or a user's
sessions are one range of the label index. Its ids, its own state and its ADK times
(float seconds, kept exactly) are its row of `adk_sessions`, so an append rewrites
that small row, not the session's.

An event is a turn holding one item, the event's JSON, on the head read in the same
transaction: two appends to one session are serialized by the writer and neither is
lost. An append's event, its session's state and update time, and the app's and the
user's shared state (`adk_shared_state`) commit in one transaction or not at all, and
a read of a session takes one read transaction, so its state and its events are of
one moment.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import orjson

from ledger.api import reads, writes
from ledger.api.records import Row
from ledger.port.errors import NotFound

PREFIX = "adk:"
APP, USER = "app", "user"


def label(app_name: str, user_id: str, session_id: str) -> str:
    return PREFIX + ":".join(quote(part, safe="") for part in (app_name, user_id, session_id))


def label_range(app_name: str, user_id: str | None) -> tuple[str, str]:
    """[low, high) of the labels of an app's sessions, or of one user's."""
    low = PREFIX + quote(app_name, safe="") + ":"
    if user_id is not None:
        low += quote(user_id, safe="") + ":"
    # Quoted parts are ASCII without ':', and ';' follows ':'.
    return low, low[:-1] + ";"


# -- writes (jobs) -------------------------------------------------------------


def _merge_shared(
    conn: sqlite3.Connection,
    app_name: str,
    scope: str,
    user_id: str,
    delta: dict[str, Any],
    ts: float,
) -> None:
    if not delta:
        return
    row = conn.execute(
        "SELECT state FROM adk_shared_state WHERE app_name = ? AND scope = ? AND user_id = ?",
        (app_name, scope, user_id),
    ).fetchone()
    state = orjson.loads(row[0]) if row else {}
    state.update(delta)
    conn.execute(
        "INSERT INTO adk_shared_state (app_name, scope, user_id, state, update_time)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (app_name, scope, user_id)"
        " DO UPDATE SET state = excluded.state, update_time = excluded.update_time",
        (app_name, scope, user_id, orjson.dumps(state).decode(), ts),
    )


def create(
    conn: sqlite3.Connection,
    session_label: str,
    record: dict[str, Any],
    app_name: str,
    user_id: str,
    app_delta: dict[str, Any],
    user_delta: dict[str, Any],
    ts: float,
    now_ms: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Make the session (`Conflict` if it exists) and merge the shared deltas; the
    app's and the user's state after them."""
    writes.create_session(conn, session_label, None, None, now_ms)
    conn.execute(
        "INSERT INTO adk_sessions (session_label, app_name, user_id, session_id, state,"
        " create_time, update_time) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            session_label,
            app_name,
            user_id,
            record["id"],
            orjson.dumps(record["state"]).decode(),
            record["create_time"],
            record["update_time"],
        ),
    )
    _merge_shared(conn, app_name, APP, "", app_delta, ts)
    _merge_shared(conn, app_name, USER, user_id, user_delta, ts)
    return shared_state(conn, app_name, APP, ""), shared_state(conn, app_name, USER, user_id)


def append(
    conn: sqlite3.Connection,
    session_label: str,
    event: Row,
    session_delta: dict[str, Any],
    app_name: str,
    user_id: str,
    app_delta: dict[str, Any],
    user_delta: dict[str, Any],
    ts: float,
    now_ms: int,
) -> None:
    """One event on the session's head with its state deltas."""
    if session_delta:
        row = conn.execute(
            "SELECT state FROM adk_sessions WHERE session_label = ?", (session_label,)
        ).fetchone()
        state = orjson.loads(row[0]) if row else {}
        state.update(session_delta)
        cur = conn.execute(
            "UPDATE adk_sessions SET state = ?, update_time = ? WHERE session_label = ?",
            (orjson.dumps(state).decode(), ts, session_label),
        )
    else:
        cur = conn.execute(
            "UPDATE adk_sessions SET update_time = ? WHERE session_label = ?",
            (ts, session_label),
        )
    if cur.rowcount == 0:
        raise NotFound(f"no ADK session {session_label!r}", field="session")
    writes.append_turn(conn, session_label, [event], now_ms, create=False)
    _merge_shared(conn, app_name, APP, "", app_delta, ts)
    _merge_shared(conn, app_name, USER, user_id, user_delta, ts)


# -- reads ---------------------------------------------------------------------


@contextmanager
def snapshot(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One read transaction; the connection is in autocommit mode otherwise."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        conn.execute("COMMIT")


def shared_state(
    conn: sqlite3.Connection, app_name: str, scope: str, user_id: str
) -> dict[str, Any]:
    row = conn.execute(
        "SELECT state FROM adk_shared_state WHERE app_name = ? AND scope = ? AND user_id = ?",
        (app_name, scope, user_id),
    ).fetchone()
    return orjson.loads(row[0]) if row else {}


def user_states(conn: sqlite3.Connection, app_name: str) -> dict[str, dict[str, Any]]:
    rows = conn.execute(
        "SELECT user_id, state FROM adk_shared_state WHERE app_name = ? AND scope = ?",
        (app_name, USER),
    ).fetchall()
    return {str(user): orjson.loads(state) for user, state in rows}


_RECORD = "SELECT user_id, session_id, state, create_time, update_time FROM adk_sessions"


def _record(row: tuple[Any, ...]) -> dict[str, Any]:
    user, sid, state, created, updated = row
    return {
        "user": user,
        "id": sid,
        "state": orjson.loads(state),
        "create_time": created,
        "update_time": updated,
    }


def session_records(
    conn: sqlite3.Connection, app_name: str, user_id: str | None
) -> list[dict[str, Any]]:
    """The records of an app's sessions (or one user's), oldest update first, ties
    by user then id, as ADK lists them."""
    low, high = label_range(app_name, user_id)
    rows = conn.execute(
        f"{_RECORD} WHERE session_label >= ? AND session_label < ?", (low, high)
    ).fetchall()
    records = [_record(r) for r in rows]
    records.sort(key=lambda r: (r["update_time"], r["user"], r["id"]))
    return records


def session_record(conn: sqlite3.Connection, session_label: str) -> dict[str, Any] | None:
    row = conn.execute(f"{_RECORD} WHERE session_label = ?", (session_label,)).fetchone()
    return None if row is None else _record(row)


def event_items(
    conn: sqlite3.Connection, session_label: str, recent: int | None, after: float | None
) -> list[Any]:
    """The stored events ADK's `GetSessionConfig` asks for, oldest first: those at or
    after `after` (a timestamp), the last `recent` of them."""
    if recent == 0:
        return []
    if after is None:
        if recent is None:
            return reads.items(conn, session_label)
        return reads.last_items(conn, session_label, recent)
    found = [i for i in reads.items(conn, session_label) if i.get("timestamp", 0) >= after]
    return found if recent is None else found[-recent:]


def session_view(
    conn: sqlite3.Connection,
    app_name: str,
    user_id: str,
    session_label: str,
    recent: int | None,
    after: float | None,
) -> dict[str, Any] | None:
    """A session as `get_session` needs it, of one moment; None if there is
    no such ADK session."""
    with snapshot(conn):
        record = session_record(conn, session_label)
        if record is None:
            return None
        return {
            "record": record,
            "events": event_items(conn, session_label, recent, after),
            "app": shared_state(conn, app_name, APP, ""),
            "user": shared_state(conn, app_name, USER, user_id),
        }


def sessions_view(conn: sqlite3.Connection, app_name: str, user_id: str | None) -> dict[str, Any]:
    """An app's sessions (or one user's) as `list_sessions` needs them."""
    with snapshot(conn):
        return {
            "records": session_records(conn, app_name, user_id),
            "app": shared_state(conn, app_name, APP, ""),
            "users": user_states(conn, app_name),
        }
