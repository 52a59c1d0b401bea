"""Worker dispatches (agent_send) and their results, exactly once.

A dispatch is one transaction: the dispatch row, the worker session when the target
is new, and the task item in the target's queue. A handoff (`Handoff`) goes with the
task in the task item's text: the parent's session-state record and the entries of
its scratchpad it names, read in that same transaction; a name the scratchpad lacks
refuses the dispatch whole. The dispatch row keeps the task alone.

A dispatch ends once, in one transaction that puts one `worker_result` item into the
parent's queue and records that item on the dispatch; a dispatch that already has a
result item is never ended again, so each dispatch yields exactly one result,
whatever crashes, retries or late finishes happen. It ends by its worker's
`worker_done` (`report`: every dispatch whose task the worker has taken ends,
completed, with the result it gives); by the commit of a turn that took its task
(`settle_turn`: completed or failed with the turn, unless the session is a worker
whose completed turn waits for something, having dispatched workers of its own or
set a timer, `WAITS_ON`, in which case each later turn's commit settles it the same
way); or by its deadline passing (`sweep_timeouts`: timed out).

So a worker that never calls `worker_done` (a single-turn engine) reports the reply
of its first turn that waits for nothing; one that waits runs on, turn after turn,
until it reports, stops waiting, or times out. A task queued on a session that is not
a worker ends with the turn that took it.

A dispatch by a broker tool (`reaching`) first checks, in its own transaction, that
its turn reaches the target session or the turn to fork at (ledger/reach.py); past
that it writes only the refusal's audit row and returns None, whether the target is
another person's or does not exist.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from ledger import audit, reach
from ledger.closing import refuse_closed
from ledger.erased import refuse_erased
from ledger.items import load_item
from ledger.port.errors import Conflict, NotFound
from ledger.port.records import Dispatched, Handoff, ItemInfo, Limits, Reaching, Reported
from ledger.recent import block_of
from ledger.sessions import fork, label_free
from plumbing.ids import new_id

RESULT_PREVIEW = 16_000  # characters of the worker's reply carried in the result item
WAITS_ON = frozenset({"agent_send", "schedule"})  # tools whose outcome wakes the worker


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
    handoff: Handoff | None = None,
    reaching: Reaching | None = None,
) -> Dispatched | None:
    if reaching is not None and not _reaches(conn, reaching, target):
        audit.append(conn, at=now, op=reaching.tool, target=reaching.session, outcome="refused")
        return None
    depth = (depth_of(conn, parent) + 1) if parent else 1
    if parent is not None:
        _check_parent(conn, parent, depth, limits)
    payload = (
        task if handoff is None or parent is None else _with_handoff(conn, task, parent, handoff)
    )
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
        (item_id, session, payload, dispatch_id, now, now),
    )
    return Dispatched(dispatch_id, session, load_item(conn, item_id))


def _reaches(conn: sqlite3.Connection, by: Reaching, target: dict[str, Any]) -> bool:
    """Whether the turn of `by` reaches the session or turn `target` names ; a
    malformed target is left to `_target_session`, which says what is wrong with it."""
    kind = target.get("kind")
    if kind == "session":
        label = target.get("session")
        if not isinstance(label, str) or not label:
            return False
        alias = conn.execute(
            "SELECT session_label FROM session_aliases WHERE alias = ?", (label,)
        ).fetchone()
        if alias is not None and reach.session_owner(conn, label) is None:
            label = str(alias[0])
        return reach.reaches(conn, by.session, label, by.wide)
    if kind == "fork":
        turn = target.get("turn")
        return (
            isinstance(turn, str)
            and bool(turn)
            and reach.turn_reaches(conn, by.session, turn, by.wide)
        )
    return True


def _with_handoff(conn: sqlite3.Connection, task: str, parent: str, handoff: Handoff) -> str:
    """The task item's payload with the handoff: its text, task and handoff."""
    entries: dict[str, Any] = {}
    if handoff.scratchpad_keys:
        row = conn.execute(
            "SELECT state FROM scratchpad WHERE session_label = ?", (parent,)
        ).fetchone()
        pad = orjson.loads(row[0]) if row else {}
        missing = [k for k in handoff.scratchpad_keys if k not in pad]
        if missing:
            raise Conflict(
                f"the scratchpad of {parent} has no entry {', '.join(map(repr, missing))}",
                field="scratchpad_keys",
            )
        entries = {k: pad[k] for k in handoff.scratchpad_keys}
    if handoff.state is None and not entries:
        return task
    parts = [task, f"--- Handoff from {parent} ---"]
    if handoff.state is not None:
        parts.append(handoff.state)
    if entries:
        parts.append("Scratchpad entries handed over:\n" + orjson.dumps(entries).decode())
    handed = {"from": parent, "state": handoff.state, "scratchpad": entries}
    return orjson.dumps({"text": "\n\n".join(parts), "task": task, "handoff": handed}).decode()


def _check_parent(conn: sqlite3.Connection, parent: str, depth: int, limits: Limits) -> None:
    if conn.execute("SELECT 1 FROM sessions WHERE label = ?", (parent,)).fetchone() is None:
        raise NotFound(f"no session {parent!r}", field="parent_session")
    refuse_erased(conn, parent, "parent_session")
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
        refuse_closed(conn, label, "target")
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
        " parent_turn_id, spawn_tool_call_id, task, task_status, created_at, updated_at,"
        " updated_block) VALUES (?, 'worker', ?, 'subagent', 'active', ?, ?, ?, ?, 'running',"
        " ?, ?, ?)",
        (label, persona, parent, parent_turn, tool_call, task, now, now, block_of(now)),
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


def _taken(conn: sqlite3.Connection, session: str) -> list[str]:
    """The open dispatches on `session` whose task item the session has taken."""
    return [
        str(r[0])
        for r in conn.execute(
            "SELECT d.id FROM dispatches d JOIN queue_items q ON q.dispatch_id = d.id"
            " WHERE d.target_session = ? AND d.status = 'running'"
            " AND q.status IN ('running', 'done') ORDER BY d.created_at",
            (session,),
        )
    ]


def report(conn: sqlite3.Connection, session: str, result: str, now: int) -> Reported:
    """`worker_done`: end every dispatch whose task `session` has taken."""
    ended = _taken(conn, session)
    if not ended:
        row = conn.execute(
            "SELECT status FROM dispatches WHERE target_session = ?"
            " ORDER BY created_at DESC LIMIT 1",
            (session,),
        ).fetchone()
        if row is None:
            raise Conflict(f"{session} was dispatched no task to report on", field="result")
        if row[0] == "running":
            raise Conflict(f"{session} has not taken its task yet", field="result")
        raise Conflict(f"{session}'s task has already ended ({row[0]})", field="result")
    items = [finish(conn, d, "completed", result, now) for d in ended]
    return Reported(tuple(ended), tuple(i for i in items if i is not None))


def settle_turn(
    conn: sqlite3.Connection,
    session: str,
    status: str,
    reply: str,
    task_dispatches: list[str],
    tools_called: list[str],
    now: int,
) -> list[ItemInfo]:
    """A turn of `session` that took its inputs committed: end the
    dispatches it settles; the result items queued for their parents."""
    if not session.startswith("worker:"):
        ended = task_dispatches
    elif status == "completed" and WAITS_ON.intersection(tools_called):
        return []  # it waits for its own workers or a timer: the task goes on
    else:
        ended = _taken(conn, session)
    results = []
    for dispatch_id in ended:
        item = finish(conn, dispatch_id, status, reply, now)
        if item is not None:
            results.append(item)
    return results


def spawned_by(conn: sqlite3.Connection, tool_call: str) -> str | None:
    """The worker session a tool call made (issue 21's `tool_calls.spawned_session`)."""
    row = conn.execute(
        "SELECT label FROM sessions WHERE spawn_tool_call_id = ?", (tool_call,)
    ).fetchone()
    return None if row is None else str(row[0])


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
