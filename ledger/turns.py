"""Turn transactions: start, commit (with the head compare-and-swap), recovery, outbox.

A turn is committed in one transaction: the turn row (with its title and outcome:
core/titles.py), its input and output messages, its tool calls, its queue items' new
status, the head move, a session_history row and the outbox row of its reply. The
head moves only from the head the turn started from; if it moved meanwhile,
`commit_turn` raises HeadMoved and writes nothing, and the caller records the turn as
failed off the thread instead (`commit_orphan`): a lost race is an error, never a
silent fork.

A turn's items are marked `running` (with the turn id) before the engine is called,
so after a crash `recover_crashed` knows which turns were cut off: each becomes an
aborted turn (reason `crash`) with the output it last saved (`save_progress`, one row
per turn, removed by its commit), and its items go back to `queued`, to run again. It
is dated from when its items were marked running, or when the session's latest
committed turn ended if that is later: no two turns of a session overlap in time
(docs/turns.md).

A job here may run again after the storage refused its COMMIT: nothing of the failed
run was kept, so the head compare-and-swap, the outbox row and the item updates see
the same ledger again, and jobs behind it wait, so the order holds.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import orjson

from core import titles, turn_summary
from core.session_state import totals_of
from core.turn_events import intent_payload, model_calls
from ledger import live_events as ev
from ledger.dispatch import settle_turn, spawned_by
from ledger.events import stored_scratchpad
from ledger.items import ITEM_COLUMNS, item_from_row
from ledger.port.errors import HeadMoved, NotFound
from ledger.port.records import ActorStart, ItemInfo, OutboxKey, Route, TurnRecord
from ledger.recent import block_of
from ledger.resets import pending_thread
from ledger.state_records import record_turn_state
from plumbing.ids import new_id


def load_open_items(conn: sqlite3.Connection, session: str | None = None) -> list[ItemInfo]:
    """Waiting and running items in arrival order (of one session, or all)."""
    sql = (
        f"SELECT {ITEM_COLUMNS} FROM queue_items q LEFT JOIN inbound i ON i.id = q.inbound_id"
        " WHERE q.status IN ('queued', 'running')"
    )
    args: tuple[str, ...] = ()
    if session is not None:
        sql += " AND q.session_label = ?"
        args = (session,)
    return [item_from_row(r) for r in conn.execute(sql + " ORDER BY q.seq", args)]


def mark_running(conn: sqlite3.Connection, turn_id: str, item_ids: list[str], now: int) -> None:
    """Stamp the turn's items as running, those still waiting (or already its own): an
    item another turn took or finished is left alone. Under the Temporal runtime two
    attempts of one turn's activity can overlap (a live node's heartbeat came late),
    and the late one must not take back what the other consumed."""
    conn.executemany(
        "UPDATE queue_items SET status = 'running', turn_id = ?, updated_at = ?"
        " WHERE id = ? AND (status = 'queued' OR (status = 'running' AND turn_id = ?))",
        [(turn_id, now, i, turn_id) for i in item_ids],
    )


def _inputs_taken(conn: sqlite3.Connection, rec: TurnRecord, item_turn: str | None) -> int:
    """How many of the turn's inputs another turn took or finished meanwhile, read after
    this turn wrote its own (`rec.item_status`, `item_turn`) to those still its."""
    marks = ",".join("?" * len(rec.inputs))
    (taken,) = conn.execute(
        f"SELECT count(*) FROM queue_items WHERE id IN ({marks})"
        " AND NOT (status = ? AND turn_id IS ?)"
        " AND NOT (status = 'queued' OR (status = 'running' AND turn_id = ?))",
        (*(i.id for i in rec.inputs), rec.item_status, item_turn, rec.turn_id),
    ).fetchone()
    return int(taken)


def save_progress(
    conn: sqlite3.Connection, turn_id: str, session: str, output: str, now: int
) -> None:
    """Save the output a running turn has streamed so far."""
    conn.execute(
        "INSERT INTO turn_progress (turn_id, session_label, output, updated_at)"
        " VALUES (?, ?, ?, ?) ON CONFLICT (turn_id) DO UPDATE"
        " SET output = excluded.output, updated_at = excluded.updated_at",
        (turn_id, session, output, now),
    )


def set_item_status(
    conn: sqlite3.Connection, items: list[tuple[str, str, str | None]], now: int
) -> None:
    """(item id, status, reason) for items dropped, cancelled or handled as commands."""
    conn.executemany(
        "UPDATE queue_items SET status = ?, reason = ?, updated_at = ? WHERE id = ?",
        [(status, reason, now, item) for item, status, reason in items],
    )


def session_head(conn: sqlite3.Connection, label: str) -> tuple[str | None, str | None]:
    row = conn.execute(
        "SELECT head_turn_id, persona FROM sessions WHERE label = ?", (label,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no session {label!r}", field="session")
    return row[0], row[1]


_MOVE_HEAD = (
    "UPDATE sessions SET head_turn_id = ?, turns = turns + 1, updated_at = ?,"
    " total_prompt_tokens = total_prompt_tokens + ?,"
    " total_completion_tokens = total_completion_tokens + ?,"
    " total_model_calls = total_model_calls + ?, total_tool_calls = total_tool_calls + ?,"
    " total_errors = total_errors + ?, total_events = total_events + ?,"
    " total_files_modified = total_files_modified + ?,"
    " total_errors_resolved = total_errors_resolved + ?, model = coalesce(?, model),"
    " event_seq = event_seq + ?"
)
_MOVE_HEAD_WHERE = " WHERE label = ? AND head_turn_id IS ? AND status != 'erased'"
_MOVE_HEAD_SQL = _MOVE_HEAD + _MOVE_HEAD_WHERE + " AND updated_block = ?"
_MOVE_HEAD_BLOCK_SQL = _MOVE_HEAD + ", updated_block = ?" + _MOVE_HEAD_WHERE


def commit_turn(
    conn: sqlite3.Connection, rec: TurnRecord, snapshot_max_bytes: int | None = None
) -> list[ItemInfo]:
    """Commit a turn on its thread; returns the worker results it queued for parents.

    Like every writer job it leaves `rec` alone: it may run in another process.
    Its `file` events' contents over `snapshot_max_bytes` (None: the writer's
    setting) are kept by hash only (ledger/snapshots.py).
    """
    totals = totals_of(rec.events)
    paths = ev.modified(rec.events)
    files = ev.new_files(conn, rec.session, rec.turn_id, paths) if paths else 0
    # The head moves and the running totals grow in one statement, which also takes
    # the session sequence numbers of the events the commit writes; the numbers are
    # read back by key, cheaper than a RETURNING clause (docs/performance.md).
    numbered = max(len(rec.events) - rec.events_written, 0) + bool(paths)
    args = (
        rec.turn_id,
        rec.completed_at,
        rec.prompt_tokens or 0,
        rec.completion_tokens or 0,
        model_calls(rec.events),
        len(rec.tool_calls),
        totals["errors"],
        totals["events"] + bool(paths),  # and its snapshot event
        files,
        totals["errors_resolved"],
        rec.model,
        numbered,
    )
    block = block_of(rec.completed_at)  # written only when it changes (ledger/recent.py)
    head = (rec.session, rec.parent_id)
    moved = conn.execute(_MOVE_HEAD_SQL, (*args, *head, block)).rowcount
    if moved == 0:
        moved = conn.execute(_MOVE_HEAD_BLOCK_SQL, (*args, block, *head)).rowcount
    if moved != 1:
        raise HeadMoved(f"the head of {rec.session} moved while turn {rec.turn_id} ran")
    if rec.system_prompt is not None:  # given only when it changed: off the session row
        conn.execute(
            "INSERT INTO session_prompts (session_label, system_prompt) VALUES (?, ?)"
            " ON CONFLICT (session_label) DO UPDATE SET system_prompt = excluded.system_prompt",
            (rec.session, rec.system_prompt),
        )
    first_seq = None
    if numbered:
        (last,) = conn.execute(
            "SELECT event_seq FROM sessions WHERE label = ?", (rec.session,)
        ).fetchone()
        first_seq = int(last) - numbered + 1
    results = _write_turn(conn, rec, snapshot_max_bytes, first_seq)
    record_turn_state(conn, rec)  # the thread's state record (ledger/state_records.py)
    conn.execute(
        "INSERT INTO session_history (session_label, turn_id, prev_turn_id, reason, changed_at)"
        " VALUES (?, ?, ?, 'turn', ?)",
        (rec.session, rec.turn_id, rec.parent_id, rec.completed_at),
    )
    return results


def commit_orphan(
    conn: sqlite3.Connection, rec: TurnRecord, snapshot_max_bytes: int | None = None
) -> list[ItemInfo]:
    """Record a turn that lost the head race: failed, off the thread, head untouched."""
    status = conn.execute("SELECT status FROM sessions WHERE label = ?", (rec.session,)).fetchone()
    if status is None or status[0] == "erased":
        return []  # its person was erased while it ran (ledger/erasure.py): nothing is kept
    error = f"the session's head moved while the turn ran (from {rec.parent_id})"
    failed = replace(rec, status="failed", reason="head_moved", error=error, outcome=None)
    # Only the items still running under this very turn are its to end: a late attempt
    # of a turn must not end an item another attempt is running, or consumed.
    return _write_turn(conn, failed, snapshot_max_bytes, own_items_only=True)


def _write_turn(
    conn: sqlite3.Connection,
    rec: TurnRecord,
    snapshot_max_bytes: int | None = None,
    first_session_seq: int | None = None,
    own_items_only: bool = False,
) -> list[ItemInfo]:
    """The turn's rows. `first_session_seq`: the first of the session sequence numbers
    its events take, taken already; None: they take their own (live_events.py)."""
    title, source = rec.title, rec.title_source
    if title is None:
        inputs = [it.content for it in rec.inputs]
        title, source = titles.turn_title(inputs, rec.output, rec.events, rec.type)
    outcome = rec.outcome or titles.outcome_line(rec.status, rec.reason, rec.error)
    summary = rec.summary
    if summary is None:
        summary = turn_summary.summarize(outcome, rec.output, rec.tool_calls, rec.events)
    conn.execute(
        "INSERT INTO turns (id, session_label, parent_id, type, status, reason, error, output,"
        " engine, model, started_at, completed_at, prompt_tokens, completion_tokens, title,"
        " title_source, outcome, summary, metadata)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            rec.turn_id,
            rec.session,
            rec.parent_id,
            rec.type,
            rec.status,
            rec.reason,
            rec.error,
            rec.output,
            rec.engine,
            rec.model,
            rec.started_at,
            rec.completed_at,
            rec.prompt_tokens,
            rec.completion_tokens,
            title,
            source,
            outcome,
            orjson.dumps(summary).decode(),
            None if rec.metadata is None else orjson.dumps(rec.metadata).decode(),
        ),
    )
    counts = rec.input_tokens or []
    messages: list[tuple[object, ...]] = [
        (
            rec.turn_id,
            n,
            "user",
            it.channel,
            input_msg_id(it),
            it.id,
            it.sender_id,
            it.content,
            counts[n] if n < len(counts) else None,
            rec.started_at,
        )
        for n, it in enumerate(rec.inputs)
    ]
    if rec.output or rec.status == "completed":
        messages.append(
            (
                rec.turn_id,
                len(messages),
                "assistant",
                None,
                None,
                None,
                None,
                rec.output,
                rec.output_tokens,
                rec.completed_at,
            )
        )
    conn.executemany(
        "INSERT INTO messages (turn_id, seq, role, channel, msg_id, item_id, sender_id, content,"
        " tokens, created_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
        messages,
    )
    if rec.compaction is not None:
        row = {
            "turn_id": rec.turn_id,
            "session_label": rec.session,
            "created_at": rec.completed_at,
            **rec.compaction,
        }
        conn.execute(
            f"INSERT INTO compactions ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
            tuple(row.values()),
        )
    if rec.tool_calls:  # most turns make none: then no statement at all
        conn.executemany(
            "INSERT INTO tool_calls (id, turn_id, seq, name, arguments, result, status,"
            " spawned_session, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
            [
                (
                    tc.id or new_id(),
                    rec.turn_id,
                    n,
                    tc.name,
                    tc.arguments,
                    tc.result,
                    tc.status,
                    spawned_by(conn, tc.id) if tc.name == "agent_send" and tc.id else None,
                    rec.completed_at,
                )
                for n, tc in enumerate(rec.tool_calls)
            ],
        )
    item_turn = None if rec.item_status == "queued" else rec.turn_id
    sql = "UPDATE queue_items SET status = ?, reason = ?, turn_id = ?, updated_at = ? WHERE id = ?"
    if own_items_only:
        conn.executemany(
            sql + " AND status = 'running' AND turn_id = ?",
            [
                (rec.item_status, rec.item_reason, item_turn, rec.completed_at, it.id, rec.turn_id)
                for it in rec.inputs
            ],
        )
    else:
        # Never an item another turn took or ended. The row count tells in one statement
        # whether all were still this turn's; only when it falls short (an input already
        # ended, or a late duplicate of a turn) does a read tell which, and a late
        # duplicate loses: the whole job is undone.
        cur = conn.executemany(
            sql + " AND (status = 'queued' OR (status = 'running' AND turn_id = ?))",
            [
                (rec.item_status, rec.item_reason, item_turn, rec.completed_at, it.id, rec.turn_id)
                for it in rec.inputs
            ],
        )
        if cur.rowcount != len({it.id for it in rec.inputs}) and _inputs_taken(
            conn, rec, item_turn
        ):
            raise HeadMoved(f"the inputs of turn {rec.turn_id} were consumed by another turn")
    if rec.outbox is not None:
        out_id, channel, frame = rec.outbox
        conn.execute(
            "INSERT INTO outbox (out_id, session_label, turn_id, channel, frame, created_at)"
            " VALUES (?,?,?,?,?,?)",
            (out_id, rec.session, rec.turn_id, channel, frame, rec.completed_at),
        )
    # File contents go to their blobs; the event rows keep path, op and hashes.
    ev.commit_events(
        conn, rec.turn_id, rec.session, rec.parent_id, rec.events, rec.events_written,
        rec.completed_at, snapshot_max_bytes, first_session_seq,
    )  # fmt: skip
    if rec.progress_saved:
        conn.execute("DELETE FROM turn_progress WHERE turn_id = ?", (rec.turn_id,))
    return _finish_dispatches(conn, rec)


def _finish_dispatches(conn: sqlite3.Connection, rec: TurnRecord) -> list[ItemInfo]:
    """A turn that took its inputs may end dispatches (ledger/dispatch.py);
    the result items it queued for parent sessions."""
    if rec.item_status != "done":
        return []
    tasks = [item.dispatch_id for item in rec.inputs if item.dispatch_id is not None]
    if not tasks and not rec.session.startswith("worker:"):
        return []  # the hot path: a person's turn carries no task
    status = "completed" if rec.status == "completed" else "failed"
    reply = rec.output if status == "completed" else (rec.error or rec.output)
    called = [tc.name for tc in rec.tool_calls if tc.status == "ok"]
    return settle_turn(conn, rec.session, status, reply, tasks, called, rec.completed_at)


def add_outbox(
    conn: sqlite3.Connection, out_id: str, session: str, channel: str, frame: str, now: int
) -> None:
    conn.execute(
        "INSERT INTO outbox (out_id, session_label, turn_id, channel, frame, created_at)"
        " VALUES (?, ?, NULL, ?, ?, ?)",
        (out_id, session, channel, frame, now),
    )


def recover_crashed(conn: sqlite3.Connection, now: int, session: str | None = None) -> list[str]:
    """Turn every turn cut off by a crash into an aborted turn; re-queue its items."""
    running = [it for it in load_open_items(conn, session) if it.status == "running"]
    by_turn: dict[str, list[ItemInfo]] = {}
    for item in running:
        by_turn.setdefault(item.turn_id or "", []).append(item)
    recovered = []
    for turn_id, items in by_turn.items():
        session = items[0].session
        head, _persona = session_head(conn, session)
        saved = conn.execute(
            "SELECT output FROM turn_progress WHERE turn_id = ?", (turn_id,)
        ).fetchone()
        written = ev.written_events(conn, turn_id) if turn_id else []
        if not written:  # its intent was not written yet: rebuilt from its inputs
            inputs = [(i.msg_id, i.sender_name or i.sender_id, i.content) for i in items]
            intent = ("intent", intent_payload(inputs))
        conn.execute("DELETE FROM turn_progress WHERE turn_id = ?", (turn_id,))
        # mark_running stamped the turn's items with its start; never
        # before the end of a turn it waited for.
        (started,) = conn.execute(
            "SELECT max(q.updated_at, coalesce((SELECT max(completed_at) FROM turns"
            " WHERE session_label = q.session_label), 0)) FROM queue_items q WHERE q.id = ?",
            (items[0].id,),
        ).fetchone()
        rec = TurnRecord(
            turn_id=turn_id or new_id(),
            session=session,
            parent_id=head,
            type="turn" if len(items) == 1 else "queue_batch",
            status="aborted",
            reason="crash",
            error="the broker stopped while this turn ran",
            output=saved[0] if saved else "",
            engine="",
            model=None,
            started_at=started,
            completed_at=now,
            prompt_tokens=None,
            completion_tokens=None,
            inputs=items,
            item_status="queued",
            events=written or [intent],  # written while it ran: attached, counted now
            events_written=len(written),
        )
        if conn.execute("SELECT 1 FROM turns WHERE id = ?", (rec.turn_id,)).fetchone():
            rec.turn_id = new_id()  # the id was used by a committed turn: never reuse it
        if rec.turn_id != turn_id:  # its items become this turn's, as mark_running would
            conn.executemany(
                "UPDATE queue_items SET turn_id = ? WHERE id = ? AND status = 'running'"
                " AND turn_id IS ?",
                [(rec.turn_id, i.id, turn_id or None) for i in items],
            )
        commit_turn(conn, rec)
        recovered.append(rec.turn_id)
    return recovered


def pending_outbox(
    conn: sqlite3.Connection, channel: str, limit: int, after: OutboxKey | None = None
) -> list[tuple[str, str, str, OutboxKey]]:
    """(out_id, session, frame, key) of up to `limit` replies of a channel not yet
    confirmed, oldest first, from after `after` on (a page of them)."""
    since = after or (-1, "")
    return [
        (str(r[0]), str(r[1]), str(r[2]), (int(r[3]), str(r[0])))
        for r in conn.execute(
            "SELECT out_id, session_label, frame, created_at FROM outbox WHERE channel = ?"
            " AND status = 'pending' AND (created_at, out_id) > (?, ?)"
            " ORDER BY created_at, out_id LIMIT ?",
            (channel, *since, limit),
        )
    ]


def mark_delivered(conn: sqlite3.Connection, out_ids: list[str], now: int) -> int:
    cur = conn.executemany(
        "UPDATE outbox SET status = 'delivered', delivered_at = ? WHERE out_id = ?"
        " AND status = 'pending'",
        [(now, o) for o in out_ids],
    )
    return cur.rowcount


def last_route(conn: sqlite3.Connection, label: str) -> Route | None:
    """Where the session's latest inbound message came from, through indexed lookups."""
    row = conn.execute(
        "SELECT i.channel, i.peer_kind, i.peer_id, i.thread_id FROM turns t"
        " JOIN messages m ON m.turn_id = t.id AND m.role = 'user' AND m.msg_id IS NOT NULL"
        " JOIN inbound i ON i.channel = m.channel AND i.msg_id = m.msg_id"
        " WHERE t.session_label = ? ORDER BY t.started_at DESC, m.seq DESC LIMIT 1",
        (label,),
    ).fetchone()
    return None if row is None else (str(row[0]), row[1], row[2], row[3])


def actor_start(conn: sqlite3.Connection, label: str) -> ActorStart:
    row = conn.execute(
        "SELECT head_turn_id, persona, queue_override, turns, total_prompt_tokens,"
        " total_completion_tokens, kind, total_files_modified FROM sessions WHERE label = ?",
        (label,),
    ).fetchone()
    if row is None:
        raise NotFound(f"no session {label!r}", field="session")
    pad, pad_at = stored_scratchpad(conn, label) or (None, -1)
    start = ActorStart(
        row[0],
        row[1],
        row[2],
        int(row[3]),
        (int(row[4]), int(row[5])),
        str(row[6]),
        last_route(conn, label),
        pending_thread(conn, label),
        scratchpad=pad,
        scratchpad_at=pad_at,
        files_known=bool(row[7]),
    )
    return replace(start, ancestors=ancestor_routes(conn, label)) if row[6] == "worker" else start


# A chain of workers longer than this is cut short (agent_send bounds depth far below).
MAX_ANCESTORS = 64


def ancestor_routes(conn: sqlite3.Connection, label: str) -> tuple[Route | None, ...]:
    """The routes of the sessions worker `label` came from, nearest first: its parent's,
    and on up while the parent is itself a worker."""
    routes: list[Route | None] = []
    seen = {label}
    kind, parent = "worker", _parent(conn, label)
    while kind == "worker" and parent is not None and parent not in seen:
        if len(routes) >= MAX_ANCESTORS:
            break
        seen.add(parent)
        routes.append(open_route(conn, parent) or last_route(conn, parent))
        row = conn.execute(
            "SELECT kind, parent_session FROM sessions WHERE label = ?", (parent,)
        ).fetchone()
        if row is None:
            break
        kind, parent = str(row[0]), row[1]
    return tuple(routes)


def open_route(conn: sqlite3.Connection, label: str) -> Route | None:
    """Where the session's latest message still waiting or running came from: a parent
    whose turn spawned a worker has not committed that turn yet."""
    row = conn.execute(
        "SELECT i.channel, i.peer_kind, i.peer_id, i.thread_id FROM queue_items q"
        " JOIN inbound i ON i.id = q.inbound_id WHERE q.session_label = ?"
        " AND q.status IN ('queued', 'running') ORDER BY q.seq DESC LIMIT 1",
        (label,),
    ).fetchone()
    return None if row is None else (str(row[0]), row[1], row[2], row[3])


def _parent(conn: sqlite3.Connection, label: str) -> str | None:
    row = conn.execute("SELECT parent_session FROM sessions WHERE label = ?", (label,)).fetchone()
    return None if row is None else row[0]


def command_done(
    conn: sqlite3.Connection,
    item_id: str,
    reason: str,
    reply: tuple[str, str, str, str] | None,  # (out_id, session, channel, frame)
    override: str | bool | None,  # JSON to store, None to clear, False to leave alone
    now: int,
) -> None:
    set_item_status(conn, [(item_id, "done", reason)], now)
    if override is not False:
        conn.execute(
            "UPDATE sessions SET queue_override = ?, updated_at = ?, updated_block = ?"
            " WHERE label = (SELECT session_label FROM queue_items WHERE id = ?)",
            (override, now, block_of(now), item_id),
        )
    if reply is not None:
        out_id, session, channel, frame = reply
        add_outbox(conn, out_id, session, channel, frame, now)


def input_msg_id(item: ItemInfo) -> str | None:
    """The name a turn lists its input by: its message's msg_id, or a timer firing's
    (`timer:<timer>:<n>`, kept in the item's payload by ledger/timers.py)."""
    if item.msg_id is not None or item.source != "timer" or not item.payload:
        return item.msg_id
    try:
        value = orjson.loads(item.payload)
    except orjson.JSONDecodeError:
        return None
    name = value.get("msg_id") if isinstance(value, dict) else None
    return name if isinstance(name, str) else None
