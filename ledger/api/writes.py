"""The library face's writes: jobs for the ledger's one writer (functions of a
connection and plain arguments: ledger/writer/jobs.py).

A library turn is an ordinary completed turn (engine 'library', one message row an
item) and its head move in one transaction, as the daemon commits its own; the turn's
parent is the head read in that same transaction, so two appends to one session are
serialized by the single writer, never interleaved. An append writes no
`session_history` row (the turn's `parent_id` already says what it would; moves a
parent link cannot tell, such as pop, clear, put and compact, still write it), takes
its parent from the session row in its own INSERT, tells by the head's UPDATE row
count whether the session exists, and binds no None (docs/performance.md).

Nothing on a thread is rewritten: `pop` moves the head back, `clear` and `put` move
it to a new thread, and the old turns stay in the ledger, off the thread, as after
the daemon's `/new`; only `delete` removes rows, and only of a session nothing else
builds on. `pop` takes the last item the reads show (reads.py): from a turn holding
more than one, by a copy of it without that item (keeping the turn's engine and
status, so an aborted turn's inputs stay hidden); from a summary, by a copy of the
compaction turn (and its `compactions` row) without it, never by moving to the
turn's parent, which would bring back the summarized history; from the turns a
daemon compaction kept, by a copy of the compaction turn on that turn's copy. An
input of a turn the daemon aborted is never popped: such a turn showing nothing is
looked past like an empty one.

A compaction is a turn of type 'compaction' holding the summary items, committed only
if the head is still the one that was summarized.

A closed session (`end`: ledger/closing.py) takes no more writes: an append, pop,
clear, put or compaction raises `SessionEnded` and stores nothing.
"""

from __future__ import annotations

import sqlite3

import orjson

from ledger.api.errors import SessionEnded
from ledger.api.records import LIBRARY, Row
from ledger.closing import close_session
from ledger.fts import forget_deleted, index_new_messages
from ledger.port.errors import Conflict, NotFound
from ledger.reads import hidden
from ledger.recent import block_of
from plumbing.ids import new_id


def refuse_ended(conn: sqlite3.Connection, label: str) -> None:
    """Raise `SessionEnded` if session `label` was closed."""
    row = conn.execute(
        "SELECT ended_at FROM sessions WHERE label = ? AND status = 'closed'", (label,)
    ).fetchone()
    if row is not None:
        raise SessionEnded(f"session {label!r} ended (at {row[0]} ms)", field="session")


def end_session(conn: sqlite3.Connection, label: str, summary: str | None, now: int) -> None:
    """`Store.end`: close the session (ledger/closing.py)."""
    try:
        close_session(conn, label, summary, now)
    except Conflict:
        refuse_ended(conn, label)  # already closed: say so as an append would
        raise


def _head(conn: sqlite3.Connection, label: str) -> tuple[str | None] | None:
    """The session's head (in a tuple), None when there is no such session: an erased
    person's is gone from the erasure's mark on (ledger/forgotten.py)."""
    row = conn.execute(
        "SELECT head_turn_id FROM sessions WHERE label = ? AND status != 'erased'", (label,)
    ).fetchone()
    return None if row is None else (row[0],)


def _exists(conn: sqlite3.Connection, label: str) -> bool:
    return conn.execute("SELECT 1 FROM sessions WHERE label = ?", (label,)).fetchone() is not None


def create_session(
    conn: sqlite3.Connection,
    label: str,
    title: str | None,
    metadata: str | None,
    now: int,
    exist_ok: bool = False,
) -> bool:
    """Make the session; False when it exists and `exist_ok`."""
    if _head(conn, label) is not None:
        if exist_ok:
            return False
        raise Conflict(f"a session {label!r} exists", field="session")
    if conn.execute("SELECT 1 FROM session_aliases WHERE alias = ?", (label,)).fetchone():
        raise Conflict(f"{label!r} is an alias of another session", field="session")
    conn.execute(
        "INSERT INTO sessions (label, kind, origin, status, title, metadata, created_at,"
        " updated_at, updated_block) VALUES (?, 'library', 'library', 'active', ?, ?, ?, ?, ?)",
        (label, title, metadata, now, now, block_of(now)),
    )
    return True


def _insert_turn(
    conn: sqlite3.Connection,
    label: str,
    parent: str | None,
    rows: list[Row],
    now: int,
    kind: str = "turn",
    usage: tuple[int | None, int | None] = (None, None),
    engine: str | None = LIBRARY,
    status: str = "completed",
) -> str:
    turn_id = new_id()
    conn.execute(
        "INSERT INTO turns (id, session_label, parent_id, type, status, engine, started_at,"
        " completed_at, prompt_tokens, completion_tokens)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (turn_id, label, parent, kind, status, engine, now, now, *usage),
    )
    conn.executemany(
        "INSERT INTO messages (turn_id, seq, role, content, created_at) VALUES (?, ?, ?, ?, ?)",
        [(turn_id, seq, role, content, now) for seq, (role, content) in enumerate(rows)],
    )
    return turn_id


def _move_head(
    conn: sqlite3.Connection,
    label: str,
    head: str | None,
    prev: str | None,
    turns_delta: int | None,
    reason: str | None,
    now: int,
) -> None:
    """Point the session at `head`; a `reason` notes the move in `session_history`."""
    if turns_delta is None:  # a new thread: count it afresh
        conn.execute(
            "UPDATE sessions SET head_turn_id = ?, updated_at = ?, updated_block = ?,"
            " turns = (WITH RECURSIVE c(id) AS (SELECT ? UNION ALL SELECT t.parent_id"
            " FROM turns t JOIN c ON t.id = c.id WHERE t.parent_id IS NOT NULL)"
            " SELECT count(*) FROM c WHERE id IS NOT NULL) WHERE label = ?",
            (head, now, block_of(now), head, label),
        )
    else:
        conn.execute(
            "UPDATE sessions SET head_turn_id = ?, turns = max(turns + ?, 0), updated_at = ?,"
            " updated_block = ? WHERE label = ?",
            (head, turns_delta, now, block_of(now), label),
        )
    if reason is None:  # an append: its parent link says it
        return
    conn.execute(
        "INSERT INTO session_history (session_label, turn_id, prev_turn_id, reason, changed_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (label, head, prev, reason, now),
    )


_APPEND_TURN = (
    "INSERT INTO turns (id, session_label, parent_id, type, status, engine, started_at,"
    " completed_at, prompt_tokens, completion_tokens) VALUES (?1, ?2, (SELECT head_turn_id"
    f" FROM sessions WHERE label = ?2), 'turn', 'completed', '{LIBRARY}', ?3, ?3, "
)
_APPEND_TURN_SQL = _APPEND_TURN + "NULL, NULL)"
_APPEND_TURN_WITH_USAGE_SQL = _APPEND_TURN + "?4, ?5)"
_ADD_USAGE_SQL = (
    "UPDATE sessions SET total_prompt_tokens = total_prompt_tokens + ?,"
    " total_completion_tokens = total_completion_tokens + ? WHERE label = ?"
)
_APPEND_HEAD = "UPDATE sessions SET head_turn_id = ?, turns = turns + 1, updated_at = ?"
_OPEN = " AND status NOT IN ('closed', 'erased')"
_APPEND_HEAD_SQL = _APPEND_HEAD + " WHERE label = ?" + _OPEN + " AND updated_block = ?"
_APPEND_HEAD_BLOCK_SQL = _APPEND_HEAD + ", updated_block = ? WHERE label = ?" + _OPEN


def append_turn(
    conn: sqlite3.Connection,
    label: str,
    rows: list[Row],
    now: int,
    create: bool,
    usage: tuple[int | None, int | None] = (None, None),
    metadata: str | None = None,
) -> str:
    """One turn holding `rows` on the session's head; its id. `metadata`: the turn's,
    as JSON text."""
    turn_id = new_id()
    if usage == (None, None):  # bind no None
        conn.execute(_APPEND_TURN_SQL, (turn_id, label, now))
    else:
        conn.execute(_APPEND_TURN_WITH_USAGE_SQL, (turn_id, label, now, *usage))
    if metadata is not None:  # most appends carry none: then no statement
        conn.execute("UPDATE turns SET metadata = ? WHERE id = ?", (metadata, turn_id))
    conn.executemany(
        "INSERT INTO messages (turn_id, seq, role, content, created_at) VALUES (?, ?, ?, ?, ?)",
        [(turn_id, seq, role, content, now) for seq, (role, content) in enumerate(rows)],
    )
    block = block_of(now)  # written only when it changes (ledger/recent.py)
    moved = conn.execute(_APPEND_HEAD_SQL, (turn_id, now, label, block)).rowcount
    if moved == 0:
        moved = conn.execute(_APPEND_HEAD_BLOCK_SQL, (turn_id, now, block, label)).rowcount
    if moved == 0:  # no such session: the turn above has no parent, as a first turn
        refuse_ended(conn, label)  # or a closed one: the job rolls back
        if not create or _exists(conn, label):  # an erased one: gone (ledger/forgotten.py)
            raise NotFound(f"no session {label!r}", field="session")  # the job rolls back
        create_session(conn, label, None, None, now)
        _move_head(conn, label, turn_id, None, 1, None, now)
    if usage != (None, None):  # the session's running totals, as the daemon's turns keep
        conn.execute(_ADD_USAGE_SQL, (usage[0] or 0, usage[1] or 0, label))
    return turn_id


def pop_item(conn: sqlite3.Connection, label: str, now: int) -> tuple[str | None, str, str] | None:
    """Take the last item off the thread: (engine, role, content), or None."""
    head = _head(conn, label)
    if head is None:
        raise NotFound(f"no session {label!r}", field="session")
    refuse_ended(conn, label)
    turn, skipped = head[0], 0
    while turn is not None:
        parent, engine, kind, status = conn.execute(
            "SELECT parent_id, engine, type, status FROM turns WHERE id = ?", (turn,)
        ).fetchone()
        rows = _rows(conn, turn)
        if kind == "compaction":
            popped = _pop_kept(conn, label, turn, rows, engine, now)
            if popped is not None:  # from the turns a daemon compaction kept
                new_head, delta, item = popped
                _move_head(conn, label, new_head, head[0], delta - skipped, "pop", now)
                return item
        last = _last_shown(rows, status)
        if last is None:
            if kind == "compaction":  # the thread starts here, empty
                return None
            turn, skipped = parent, skipped + 1  # a turn showing nothing: look past it
            continue
        new_head, delta = parent, -1 - skipped
        if len(rows) > 1 or kind == "compaction":
            kept = rows[:last] + rows[last + 1 :]
            # The copy keeps the engine and the status: they say how its rows read
            # back (records.py), and an aborted turn's inputs stay hidden.
            copy = _insert_turn(conn, label, parent, kept, now, kind, engine=engine, status=status)
            if kind == "compaction":
                _copy_compaction(conn, turn, copy, label, _summary(kept, engine), now)
            new_head, delta = copy, -skipped
        _move_head(conn, label, new_head, head[0], delta, "pop", now)
        role, content = rows[last]
        return engine, role, content
    return None


def _rows(conn: sqlite3.Connection, turn: str) -> list[Row]:
    """The (role, content) of each message of `turn`, in order."""
    rows = conn.execute(
        "SELECT role, content FROM messages WHERE turn_id = ? ORDER BY seq", (turn,)
    ).fetchall()
    return [(str(r), str(c)) for r, c in rows]


def _last_shown(rows: list[Row], status: str) -> int | None:
    """The position of the last of `rows` the reads show, or None."""
    for at in range(len(rows) - 1, -1, -1):
        if not hidden(status, rows[at][0]):
            return at
    return None


def _copy_compaction(
    conn: sqlite3.Connection,
    turn: str,
    copy: str,
    label: str,
    summary: str | None,
    now: int,
    first_kept: tuple[str | None] | None = None,
) -> None:
    """The `compactions` row of `turn` for its `copy`: its summary `summary` (None: the
    same), its first kept turn `first_kept[0]` if given."""
    kept, args = ("first_kept_turn_id", ()) if first_kept is None else ("?", first_kept)
    conn.execute(
        "INSERT INTO compactions (turn_id, session_label, summary, summarized_through_turn_id,"
        " first_kept_turn_id, turns_summarized, trigger, created_at) SELECT ?, ?,"
        f" coalesce(?, summary), summarized_through_turn_id, {kept}, turns_summarized,"
        " trigger, ? FROM compactions WHERE turn_id = ?",
        (copy, label, summary, *args, now, turn),
    )


def _summary(kept: list[Row], engine: str | None) -> str:
    """The summary a compaction turn holding `kept` gives the daemon."""
    if engine == LIBRARY:
        return orjson.dumps([orjson.loads(content) for _, content in kept]).decode()
    return "\n\n".join(content for _, content in kept)


def _pop_kept(
    conn: sqlite3.Connection,
    label: str,
    compaction: str,
    rows: list[Row],
    engine: str | None,
    now: int,
) -> tuple[str, int, tuple[str | None, str, str]] | None:
    """Take the last item of the turns `compaction` kept: (the new head, the
    change of the chain's length, (engine, role, content)); None when no kept turn
    holds an item."""
    row = conn.execute(
        "SELECT c.first_kept_turn_id, t.parent_id FROM compactions c JOIN turns t"
        " ON t.id = c.turn_id WHERE c.turn_id = ?",
        (compaction,),
    ).fetchone()
    if row is None or row[0] is None:
        return None
    first_kept, turn = row
    dropped = 0  # kept turns with nothing to show, newest first, that the copy leaves out
    while turn is not None:
        parent, kind, turn_engine, status = conn.execute(
            "SELECT parent_id, type, engine, status FROM turns WHERE id = ?", (turn,)
        ).fetchone()
        found: list[Row] = []
        last = None
        if kind != "compaction":  # one among the kept turns shows nothing (reads.py 1a)
            found = _rows(conn, turn)
            last = _last_shown(found, status)
        if last is not None:
            break
        if turn == first_kept:
            return None
        turn, dropped = parent, dropped + 1
    else:
        return None  # `first_kept` is not on the chain: read as the summary alone
    base, first = parent, None if turn == first_kept else first_kept
    if len(found) > 1:  # a copy without the last item takes the turn's place
        rest = found[:last] + found[last + 1 :]
        base = _insert_turn(conn, label, parent, rest, now, kind, engine=turn_engine, status=status)
        first = base if turn == first_kept else first_kept
    else:
        dropped += 1
    copy = _insert_turn(conn, label, base, rows, now, kind="compaction", engine=engine)
    _copy_compaction(conn, compaction, copy, label, None, now, (first,))
    role, content = found[last]
    return copy, -dropped, (turn_engine, role, content)


def clear(conn: sqlite3.Connection, label: str, now: int) -> None:
    head = _head(conn, label)
    if head is None:
        raise NotFound(f"no session {label!r}", field="session")
    refuse_ended(conn, label)
    if head[0] is not None:
        _move_head(conn, label, None, head[0], None, "clear", now)


def put(
    conn: sqlite3.Connection,
    label: str,
    turns: list[list[Row]],
    title: str | None,
    metadata: str | None,
    now: int,
) -> str | None:
    """Replace the session's thread by `turns`, creating it if need be."""
    head = _head(conn, label)
    if head is None:
        create_session(conn, label, title, metadata, now)
        head = (None,)
    else:
        refuse_ended(conn, label)
        if title is not None or metadata is not None:
            set_title(conn, label, title, metadata, now)
    parent: str | None = None
    for rows in turns:
        parent = _insert_turn(conn, label, parent, rows, now)
    _move_head(conn, label, parent, head[0], None, "put", now)
    return parent


def set_title(
    conn: sqlite3.Connection, label: str, title: str | None, metadata: str | None, now: int
) -> None:
    cur = conn.execute(
        "UPDATE sessions SET title = coalesce(?, title), metadata = coalesce(?, metadata),"
        " updated_at = ?, updated_block = ? WHERE label = ? AND status != 'erased'",
        (title, metadata, now, block_of(now), label),
    )
    if cur.rowcount == 0:
        raise NotFound(f"no session {label!r}", field="session")


def compact(
    conn: sqlite3.Connection,
    label: str,
    summarized_head: str | None,
    rows: list[Row],
    turns_summarized: int,
    now: int,
) -> str:
    """A compaction turn holding `rows` after `summarized_head`; its id."""
    head = _head(conn, label)
    if head is None:
        raise NotFound(f"no session {label!r}", field="session")
    refuse_ended(conn, label)
    if head[0] != summarized_head:
        raise Conflict(
            f"the session {label!r} moved on while it was being compacted; compact again",
            field="session",
        )
    turn_id = _insert_turn(conn, label, head[0], rows, now, kind="compaction")
    summary = orjson.dumps([orjson.loads(content) for _, content in rows]).decode()
    conn.execute(
        "INSERT INTO compactions (turn_id, session_label, summary, summarized_through_turn_id,"
        " turns_summarized, trigger, created_at) VALUES (?, ?, ?, ?, ?, 'manual', ?)",
        (turn_id, label, summary, summarized_head, turns_summarized, now),
    )
    _move_head(conn, label, turn_id, head[0], 1, "turn", now)
    return turn_id


# A session's rows here are the daemon's work (a binding: where a person's messages
# go): a library delete refuses rather than change what the daemon does.
DAEMON_TABLES = ("queue_items", "inbound", "timers", "dispatches", "route_bindings")
# What a delete clears: by its turns' ids (turn_state: the state record each daemon
# commit writes); by the session's label, before the turns (the outbox's rows refer to
# them) and after them.
DELETED_BY_TURN = (
    "messages",
    "tool_calls",
    "turn_events",
    "compactions",
    "turn_progress",
    "turn_state",
    "file_snapshots",
)
DELETED_BEFORE_TURNS = ("outbox",)
DELETED_BY_SESSION = (
    "session_history",
    "scratchpad",
    "session_aliases",
    "adk_sessions",
    "session_prompts",
)


def _blockers(conn: sqlite3.Connection, label: str) -> list[str]:
    """Sessions whose threads run through `label`'s turns."""
    rows = conn.execute(
        "SELECT DISTINCT c.session_label FROM turns c JOIN turns p ON p.id = c.parent_id"
        " WHERE p.session_label = ?1 AND c.session_label != ?1"
        " UNION SELECT s.label FROM sessions s JOIN turns t ON t.id = s.head_turn_id"
        " WHERE t.session_label = ?1 AND s.label != ?1",
        (label,),
    ).fetchall()
    return sorted(str(r[0]) for r in rows)


def delete(conn: sqlite3.Connection, label: str) -> None:
    """Remove the session and its turns, if nothing else needs them."""
    if _head(conn, label) is None:
        raise NotFound(f"no session {label!r}", field="session")
    forks = _blockers(conn, label)
    if forks:
        raise Conflict(
            f"the session {label!r} has forks built on its turns ({', '.join(forks[:5])});"
            " delete them first",
            field="session",
        )
    for table in DAEMON_TABLES:
        column = "parent_session" if table == "dispatches" else "session_label"
        if conn.execute(f"SELECT 1 FROM {table} WHERE {column} = ? LIMIT 1", (label,)).fetchone():
            raise Conflict(
                f"the session {label!r} holds the daemon's work ({table}); close it through"
                " the daemon instead",
                field="session",
            )
    # A message appended earlier in this same transaction is not indexed yet, and
    # the index's delete trigger must only ever see indexed rows (fts.py).
    index_new_messages(conn)
    turns = "SELECT id FROM turns WHERE session_label = ?"
    for table in DELETED_BY_TURN:
        conn.execute(f"DELETE FROM {table} WHERE turn_id IN ({turns})", (label,))
    forget_deleted(conn)  # the messages' ids may be given out again (fts.py)
    conn.execute("UPDATE sessions SET head_turn_id = NULL WHERE label = ?", (label,))
    for table in DELETED_BEFORE_TURNS:
        conn.execute(f"DELETE FROM {table} WHERE session_label = ?", (label,))
    # One statement: SQLite checks the turn tree's own foreign keys at its end.
    conn.execute("DELETE FROM turns WHERE session_label = ?", (label,))
    for table in DELETED_BY_SESSION:
        conn.execute(f"DELETE FROM {table} WHERE session_label = ?", (label,))
    conn.execute("DELETE FROM sessions WHERE label = ?", (label,))
