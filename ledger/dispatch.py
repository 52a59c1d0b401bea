"""Worker dispatches (agent_send) and their results, exactly once.

Rule 1: a dispatch is one transaction: the dispatch row, the worker session
        when the target is new, and the task item in the target's queue.
Rule 2: a dispatch ends in the transaction of the turn that consumed its task
        (completed or failed), or when its deadline passes (timed out). Ending
        it puts one `worker_result` item into the parent's queue and records
        that item on the dispatch; a dispatch that already has a result item
        is never ended again. So each dispatch yields exactly one result,
        whatever crashes, retries or late finishes happen.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

import orjson

from .errors import Conflict, NotFound
from .ids import new_id
from .items import ItemInfo, load_item
from .sessions import fork, label_free

RESULT_PREVIEW = 16_000  # characters of the worker's reply carried in the result item


@dataclass(frozen=True, slots=True)
class Limits:
    max_depth: int
    max_children: int
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class Dispatched:
    dispatch: str
    session: str
    item: ItemInfo


def depth_of(conn: sqlite3.Connection, session: str) -> int:
    row = conn.execute(
        "SELECT depth FROM dispatches WHERE target_session = ? ORDER BY created_at DESC LIMIT 1",
        (session,),
    ).fetchone()
    return int(row[0]) if row else 0


def dispatch(
    conn: sqlite3.Connection,
    *,
    parent: str | None,
    parent_turn: str | None,
    tool_call: str | None,
    target: dict[str, Any],
    task: str,
    persona: str | None,
    limits: Limits,
    now: int,
) -> Dispatched:
    depth = (depth_of(conn, parent) + 1) if parent else 1
    if parent is not None:
        _check_parent(conn, parent, depth, limits)
    session = _target_session(conn, target, parent, parent_turn, tool_call, task, persona, now)
    dispatch_id = new_id()
    item_id = new_id()
    conn.execute(
        "INSERT INTO dispatches (id, parent_session, parent_turn_id, tool_call_id,"
        " target_session, task, status, depth, deadline_at, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
        (
            dispatch_id,
            parent or "",
            parent_turn,
            tool_call,
            session,
            task,
            depth,
            now + limits.timeout_ms,
            now,
        ),
    )
    conn.execute(
        "INSERT INTO queue_items (id, session_label, source, mode, payload, dispatch_id,"
        " created_at, updated_at) VALUES (?, ?, 'operator', 'followup', ?, ?, ?, ?)",
        (item_id, session, task, dispatch_id, now, now),
    )
    return Dispatched(dispatch_id, session, load_item(conn, item_id))


def _check_parent(conn: sqlite3.Connection, parent: str, depth: int, limits: Limits) -> None:
    if conn.execute("SELECT 1 FROM sessions WHERE label = ?", (parent,)).fetchone() is None:
        raise NotFound(f"no session {parent!r}", field="parent_session")
    if depth > limits.max_depth:
        raise Conflict(
            f"workers may nest {limits.max_depth} deep; {parent} is at {depth - 1}", field="target"
        )
    running = conn.execute(
        "SELECT count(*) FROM dispatches WHERE parent_session = ? AND status = 'running'",
        (parent,),
    ).fetchone()[0]
    if running >= limits.max_children:
        raise Conflict(
            f"{parent} already has {running} running workers (the limit is {limits.max_children})",
            field="target",
        )


def _target_session(
    conn: sqlite3.Connection,
    target: dict[str, Any],
    parent: str | None,
    parent_turn: str | None,
    tool_call: str | None,
    task: str,
    persona: str | None,
    now: int,
) -> str:
    kind = target.get("kind")
    if kind == "session":
        label = str(target.get("session") or "")
        row = conn.execute("SELECT label FROM sessions WHERE label = ?", (label,)).fetchone()
        if row is None:
            alias = conn.execute(
                "SELECT session_label FROM session_aliases WHERE alias = ?", (label,)
            ).fetchone()
            if alias is None:
                raise NotFound(f"no session {label!r}", field="target")
            label = str(alias[0])
        return label
    if kind == "fork":
        return _fork_target(conn, target, now)
    if kind != "new_session":
        raise Conflict("target.kind must be 'session', 'new_session' or 'fork'", field="target")
    hint = target.get("label_hint")
    label = f"worker:{new_id()}"
    if isinstance(hint, str) and hint and label_free(conn, f"worker:{hint}"):
        label = f"worker:{hint}"
    conn.execute(
        "INSERT INTO sessions (label, kind, persona, origin, status, parent_session,"
        " parent_turn_id, spawn_tool_call_id, task, task_status, created_at, updated_at)"
        " VALUES (?, 'worker', ?, 'subagent', 'active', ?, ?, ?, ?, 'running', ?, ?)",
        (label, persona, parent, parent_turn, tool_call, task, now, now),
    )
    return label


def _fork_target(conn: sqlite3.Connection, target: dict[str, Any], now: int) -> str:
    """A new fork of a session at `turn` (seed 002: a fork is always a new session)."""
    turn = target.get("turn")
    if not isinstance(turn, str) or not turn:
        raise Conflict("a fork target needs 'turn', the id of the turn to fork at", field="target")
    hint = target.get("label_hint")
    label = None
    if isinstance(hint, str) and hint and label_free(conn, f"fork:{hint}"):
        label = f"fork:{hint}"
    try:
        return fork(conn, turn, label, now)
    except NotFound as exc:
        raise NotFound(str(exc), field="target") from exc


def finish(
    conn: sqlite3.Connection, dispatch_id: str, status: str, reply: str, now: int
) -> ItemInfo | None:
    """End a running dispatch: its result item for the parent (None if already ended)."""
    row = conn.execute(
        "SELECT parent_session, target_session, task FROM dispatches"
        " WHERE id = ? AND result_item_id IS NULL",
        (dispatch_id,),
    ).fetchone()
    if row is None:
        return None
    parent, worker, task = row
    conn.execute(
        "UPDATE sessions SET task_status = ? WHERE label = ? AND kind = 'worker'", (status, worker)
    )
    if not parent:  # dispatched by an operator with no parent: nothing to report to
        conn.execute(
            "UPDATE dispatches SET status = ?, completed_at = ?, result_item_id = '' WHERE id = ?",
            (status, now, dispatch_id),
        )
        return None
    item_id = new_id()
    payload = orjson.dumps(
        {
            "text": f"[worker {worker} {status}] task: {task[:200]}\n{reply[:RESULT_PREVIEW]}",
            "dispatch": dispatch_id,
            "worker": worker,
            "status": status,
        }
    ).decode()
    conn.execute(
        "INSERT INTO queue_items (id, session_label, source, mode, payload, created_at,"
        " updated_at) VALUES (?, ?, 'worker', NULL, ?, ?, ?)",
        (item_id, parent, payload, now, now),
    )
    conn.execute(
        "UPDATE dispatches SET status = ?, completed_at = ?, result_item_id = ? WHERE id = ?",
        (status, now, item_id, dispatch_id),
    )
    return load_item(conn, item_id)


def sweep_timeouts(conn: sqlite3.Connection, now: int) -> list[ItemInfo]:
    """End every running dispatch past its deadline as timed out."""
    rows = conn.execute(
        "SELECT id FROM dispatches WHERE status = 'running' AND deadline_at < ?", (now,)
    ).fetchall()
    out = []
    for (dispatch_id,) in rows:
        item = finish(conn, dispatch_id, "timed_out", "the worker did not finish in time", now)
        if item is not None:
            out.append(item)
    return out
