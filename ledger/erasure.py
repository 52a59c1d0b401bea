"""Forgetting a person (`entity.erase`): writer jobs that mark them erased, then remove
their rows in bounded steps.

The mark is one short transaction: it records the erasure (the union-find set of
the entity, their sessions with those forks and workers, their contacts) and at once
cuts every way in: their contacts, aliases and bindings go, so a new message from
one of their senders starts a new entity; their queued items, live timers,
undelivered replies and running dispatches are cancelled; their sessions are
`erased`, which no turn commit moves again. Every step after it is a job of its
own that touches a bounded number of rows and records in the same transaction
where it stopped, so other sessions' writes pass between steps and a restart
resumes exactly there. Steps are idempotent: one run twice removes nothing more.

In sessions that are not theirs (groups), their messages, the text of their
inbound rows and their inputs in the broker's `intent` events become `[erased]`
and the titles of the turns that held them go;
the threads stay whole. The large tables that have no index by sender or session
(`inbound`, `queue_items`, `outbox`, `messages`) are swept in key order, a chunk a
step, rather than indexed for this rare job at every write. Where the
SQLite has FTS5 secure-delete (ledger/db.py), each delete takes its terms out of the
full-text index as it goes; elsewhere the index is then merged, a bounded number of
pages a step, until it is one segment: FTS5 keeps a deleted term in its old segment
until a merge rewrites it. Freed pages
and cells are zeroed as they are freed (`secure_delete`, ledger/db.py); the WAL
and PostgreSQL's dead tuples are the shell's to clear after the last step.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger import audit
from ledger.closing import forget_session_words
from ledger.db import connect, secure_index
from ledger.fts import forget_deleted, index_new_messages
from ledger.ingest import find_root, identity_of
from ledger.merge import set_members
from ledger.port.cipher import Key
from ledger.port.erasure import ErasureRunning
from ledger.port.errors import Invalid, LedgerError, NotFound
from ledger.proposals import forget as forget_proposals
from ledger.recent import block_of

ERASED = "[erased]"
TURNS_A_STEP = 50  # turns (with their messages, calls, events, files) removed a step
SWEEP_A_STEP = 2000  # keys of a large table looked at a step
FTS_PAGES_A_STEP = 4  # pages of full-text index merged a step
CHECKPOINT_TRIES = 50  # a checkpoint that readers hold up is tried again, 20 ms apart


@dataclass(frozen=True, slots=True)
class Plan:
    """What an erasure covers, as its row records it."""

    entity: str
    entities: list[str]
    sessions: list[str]
    senders: list[tuple[str, str]]
    step: int
    cursor: Any
    counts: dict[str, int]


def marks(values: list[Any] | tuple[Any, ...]) -> str:
    return ",".join("?" * len(values))


def _senders_sql(senders: list[tuple[str, str]]) -> tuple[str, list[str]]:
    """`(channel = ? AND sender_id = ?) OR ...`; `0 = 1` for none."""
    if not senders:
        return "0 = 1", []
    sql = " OR ".join("(channel = ? AND sender_id = ?)" for _ in senders)
    return f"({sql})", [v for pair in senders for v in pair]


def _owned_sessions(conn: sqlite3.Connection, entities: list[str]) -> list[str]:
    """The DM sessions of `entities`, with their forks and workers at any depth."""
    found = {
        str(r[0])
        for r in conn.execute(
            f"SELECT label FROM sessions WHERE kind = 'dm' AND entity_id IN ({marks(entities)})",
            entities,
        )
    }
    frontier = sorted(found)
    while frontier:
        children = [
            str(r[0])
            for r in conn.execute(
                f"SELECT label FROM sessions WHERE parent_session IN ({marks(frontier)})"
                f" OR merged_into IN ({marks(frontier)})",
                [*frontier, *frontier],
            )
        ]
        frontier = sorted(set(children) - found)
        found.update(frontier)
    return sorted(found)


def running(conn: sqlite3.Connection) -> str | None:
    """The entity of the erasure that has not finished, if any."""
    row = conn.execute("SELECT entity_id FROM erasures WHERE finished_at IS NULL").fetchone()
    return None if row is None else str(row[0])


def begin(conn: sqlite3.Connection, entity: str, confirm: str, now: int) -> Plan:
    """The writer job that marks `entity` (and its whole union-find set) erased."""
    if confirm != entity:
        raise Invalid(
            f"confirm {confirm!r} differs from entity {entity!r}: give the same id twice",
            field="confirm",
        )
    other = running(conn)
    if other is not None:
        raise ErasureRunning(
            f"the erasure of {other} is still running; erase {entity} once it has finished",
            field="entity",
        )
    if conn.execute("SELECT 1 FROM entities WHERE id = ?", (entity,)).fetchone() is None:
        raise NotFound(f"no entity {entity!r}", field="entity")
    cache = identity_of(conn)
    cache.clear()
    entities = set_members(conn, find_root(conn, cache, entity))
    sessions = _owned_sessions(conn, entities)
    senders = [
        (str(r[0]), str(r[1]))
        for r in conn.execute(
            f"SELECT channel, sender_id FROM contacts WHERE entity_id IN ({marks(entities)})"
            " ORDER BY channel, sender_id",
            entities,
        )
    ]
    counts = {"sessions": len(sessions), "messages": 0, "files": 0}
    # With FTS5 secure-delete on (it stays on), every delete takes its terms out of
    # the index as it goes, and the index needs no merge at the end.
    merge = (
        getattr(conn, "full_text", None) is not None
        or not secure_index(conn)
        or whole_merge_due(conn)
    )
    conn.execute(
        "INSERT INTO erasures (entity_id, entities, sessions, senders, step, cursor, counts,"
        " started_at, index_merge) VALUES (?, ?, ?, ?, 0, NULL, ?, ?, ?)",
        (entity, json.dumps(entities), json.dumps(sessions), json.dumps(senders),
         json.dumps(counts), now, int(merge)),
    )  # fmt: skip
    _cut_off(conn, entities, sessions, senders, now)
    audit.forget_turns_of(conn, sessions)  # the audit trail keeps no id of theirs
    audit.forget(conn, [*entities, *sessions])
    cache.clear()
    forget = getattr(conn, "last_records", None)
    if forget is not None:
        forget.clear()
    return Plan(entity, entities, sessions, senders, 0, None, counts)


def _cut_off(
    conn: sqlite3.Connection,
    entities: list[str],
    sessions: list[str],
    senders: list[tuple[str, str]],
    now: int,
) -> None:
    """Every way in and every piece of outgoing work, in the marking transaction."""
    conn.execute(f"DELETE FROM contacts WHERE entity_id IN ({marks(entities)})", entities)
    forget_proposals(conn, entities, sessions)
    dm_aliases = [f"dm:{e}" for e in entities]
    conn.execute(f"DELETE FROM session_aliases WHERE alias IN ({marks(dm_aliases)})", dm_aliases)
    if sessions:
        s = marks(sessions)
        conn.execute(f"DELETE FROM session_aliases WHERE session_label IN ({s})", sessions)
        conn.execute(f"DELETE FROM route_bindings WHERE session_label IN ({s})", sessions)
        conn.execute(
            "UPDATE queue_items SET status = 'cancelled', reason = 'erased', updated_at = ?"
            f" WHERE status IN ('queued', 'running') AND session_label IN ({s})",
            [now, *sessions],
        )
        conn.execute(
            "UPDATE timers SET status = 'cancelled', next_at = NULL, updated_at = ?"
            f" WHERE status = 'live' AND session_label IN ({s})",
            [now, *sessions],
        )
        conn.execute(
            f"DELETE FROM outbox WHERE status = 'pending' AND session_label IN ({s})", sessions
        )
        conn.execute(
            "UPDATE dispatches SET status = 'failed', completed_at = ? WHERE status = 'running'"
            f" AND (parent_session IN ({s}) OR target_session IN ({s}))",
            [now, *sessions, *sessions],
        )
        conn.execute(
            "UPDATE sessions SET status = 'erased', updated_at = ?, updated_block = ?"
            f" WHERE label IN ({s})",
            [now, block_of(now), *sessions],
        )
    # Their items queued in other sessions (a group) do not run either.
    who, params = _senders_sql(senders)
    conn.execute(
        "UPDATE queue_items SET status = 'cancelled', reason = 'erased', updated_at = ?"
        # The first term lets the index of open items lead: inbound has none by sender.
        " WHERE status IN ('queued', 'running') AND status = 'queued' AND EXISTS"
        f" (SELECT 1 FROM inbound WHERE inbound.id = queue_items.inbound_id AND {who})",
        [now, *params],
    )


def plan_of(conn: sqlite3.Connection, entity: str | None = None) -> Plan | None:
    """The erasure still running (of `entity`, if given)."""
    row = conn.execute(
        "SELECT entity_id, entities, sessions, senders, step, cursor, counts FROM erasures"
        " WHERE finished_at IS NULL" + (" AND entity_id = ?" if entity else ""),
        (entity,) if entity else (),
    ).fetchone()
    if row is None:
        return None
    return Plan(
        str(row[0]),
        list(json.loads(row[1])),
        list(json.loads(row[2])),
        [(str(c), str(s)) for c, s in json.loads(row[3])],
        int(row[4]),
        None if row[5] is None else json.loads(row[5]),
        dict(json.loads(row[6])),
    )


# -- the steps --------------------------------------------------------------------

Step = Callable[[sqlite3.Connection, Plan, dict[str, int]], tuple[bool, Any]]
"""One bounded unit of work: (finished with this step, the cursor to resume at)."""

BY_TURN = ("messages", "tool_calls", "turn_events", "compactions", "turn_progress",
           "turn_state", "file_snapshots")  # fmt: skip


def drop_unnamed_blobs(conn: sqlite3.Connection, digests: set[str]) -> None:
    """The blobs among `digests` that no snapshot names any more."""
    for digest in sorted(digests):
        conn.execute(
            "DELETE FROM blobs WHERE sha256 = ?1 AND NOT EXISTS"
            " (SELECT 1 FROM file_snapshots WHERE sha256 = ?1)"
            " AND NOT EXISTS (SELECT 1 FROM file_snapshots WHERE before_sha256 = ?1)",
            (digest,),
        )


def digests_where(conn: sqlite3.Connection, where: str, params: list[Any]) -> set[str]:
    return {
        str(d)
        for row in conn.execute(
            f"SELECT sha256, before_sha256 FROM file_snapshots WHERE {where}", params
        )
        for d in row
        if d is not None
    }


def _step_turns(conn: sqlite3.Connection, plan: Plan, counts: dict[str, int]) -> tuple[bool, Any]:
    """Up to TURNS_A_STEP turns of their sessions, with everything hung on them."""
    if not plan.sessions:
        return True, None
    ids = [
        str(r[0])
        for r in conn.execute(
            f"SELECT id FROM turns WHERE session_label IN ({marks(plan.sessions)})"
            " ORDER BY id LIMIT ?",
            [*plan.sessions, TURNS_A_STEP],
        )
    ]
    if not ids:
        return True, None
    t = marks(ids)
    digests = digests_where(conn, f"turn_id IN ({t})", ids)
    for table in BY_TURN:
        cur = conn.execute(f"DELETE FROM {table} WHERE turn_id IN ({t})", ids)
        if table == "messages":
            counts["messages"] += max(cur.rowcount, 0)
        elif table == "file_snapshots":
            counts["files"] += max(cur.rowcount, 0)
    conn.execute(f"UPDATE turns SET parent_id = NULL WHERE parent_id IN ({t})", ids)
    conn.execute(f"DELETE FROM turns WHERE id IN ({t})", ids)
    drop_unnamed_blobs(conn, digests)
    return False, None


def _step_live(conn: sqlite3.Connection, plan: Plan, counts: dict[str, int]) -> tuple[bool, Any]:
    """What running turns wrote before their turn row existed."""
    if plan.sessions:
        s = marks(plan.sessions)
        digests = digests_where(conn, f"session_label IN ({s})", plan.sessions)
        cur = conn.execute(
            f"DELETE FROM file_snapshots WHERE session_label IN ({s})", plan.sessions
        )
        counts["files"] += max(cur.rowcount, 0)
        for table in ("turn_events", "turn_progress"):
            conn.execute(f"DELETE FROM {table} WHERE session_label IN ({s})", plan.sessions)
        drop_unnamed_blobs(conn, digests)
    return True, None


def _sweep(
    table: str, key: str, act: Callable[[sqlite3.Connection, Plan, str, list[Any]], int]
) -> Step:
    """A step over `table` in `key` order, SWEEP_A_STEP keys at a time: `act` gets the
    range's condition and its parameters, and returns the rows it counts."""

    def step(conn: sqlite3.Connection, plan: Plan, counts: dict[str, int]) -> tuple[bool, Any]:
        after = plan.cursor
        rows = conn.execute(
            f"SELECT {key} FROM {table}"
            + (f" WHERE {key} > ?" if after is not None else "")
            + f" ORDER BY {key} LIMIT ?",
            [*([after] if after is not None else []), SWEEP_A_STEP],
        ).fetchall()
        if not rows:
            return True, None
        last = rows[-1][0]
        if after is None:
            where, params = f"{key} <= ?", [last]
        else:
            where, params = f"{key} > ? AND {key} <= ?", [after, last]
        counts["messages"] += act(conn, plan, where, params)
        return len(rows) < SWEEP_A_STEP, last

    step.__name__ = f"_sweep_{table}"
    return step


def _in_sessions(table: str) -> Callable[[sqlite3.Connection, Plan, str, list[Any]], int]:
    def act(conn: sqlite3.Connection, plan: Plan, where: str, params: list[Any]) -> int:
        if plan.sessions:
            conn.execute(
                f"DELETE FROM {table} WHERE {where} AND session_label IN ({marks(plan.sessions)})",
                [*params, *plan.sessions],
            )
        return 0

    return act


def _inbound(conn: sqlite3.Connection, plan: Plan, where: str, params: list[Any]) -> int:
    _in_sessions("inbound")(conn, plan, where, params)
    who, who_params = _senders_sql(plan.senders)
    conn.execute(
        "UPDATE inbound SET text = ?, sender_name = NULL, meta = NULL"
        f" WHERE {where} AND {who} AND text != ?",
        [ERASED, *params, *who_params, ERASED],
    )
    return 0


def _messages(conn: sqlite3.Connection, plan: Plan, where: str, params: list[Any]) -> int:
    """Their messages in other people's sessions become `[erased]`; their turns' titles go."""
    who, who_params = _senders_sql(plan.senders)
    mine = f"{where} AND {who} AND content != ?"
    said = conn.execute(
        f"SELECT turn_id, msg_id FROM messages WHERE {mine}", [*params, *who_params, ERASED]
    ).fetchall()
    turn_ids = sorted({str(r[0]) for r in said})
    if not turn_ids:
        return 0
    forget_intents(conn, turn_ids, {str(r[1]) for r in said if r[1] is not None})
    t = marks(turn_ids)
    conn.execute(
        "UPDATE turns SET title = NULL, title_source = NULL, summary = NULL, metadata = NULL"
        f" WHERE id IN ({t})",
        turn_ids,
    )  # a summary or metadata may quote what they said
    since = conn.execute(
        f"SELECT session_label, min(started_at) FROM turns WHERE id IN ({t})"
        " GROUP BY session_label",
        turn_ids,
    ).fetchall()
    forget_records(conn, [(str(s), int(at)) for s, at in since])
    forget_session_words(conn, [str(s) for s, _ in since], ERASED)
    cur = conn.execute(
        f"UPDATE messages SET content = ? WHERE {mine}", [ERASED, *params, *who_params, ERASED]
    )
    return max(cur.rowcount, 0)


def forget_intents(conn: sqlite3.Connection, turn_ids: list[str], msg_ids: set[str]) -> None:
    """The broker's `intent` events of `turn_ids` quote each input (core/turn_events.py):
    the inputs among `msg_ids` keep their id and lose their sender and text."""
    rows = conn.execute(
        f"SELECT turn_id, seq, payload FROM turn_events WHERE turn_id IN ({marks(turn_ids)})"
        " AND type = 'intent'",
        turn_ids,
    ).fetchall()
    for turn_id, seq, payload in rows:
        try:
            intent = json.loads(payload)
        except (TypeError, ValueError):
            continue
        inputs = intent.get("inputs") if isinstance(intent, dict) else None
        if not isinstance(inputs, list):
            continue
        for item in inputs:
            if isinstance(item, dict) and item.get("msg_id") in msg_ids:
                item["sender"], item["text"] = ERASED, ERASED
        conn.execute(
            "UPDATE turn_events SET payload = ? WHERE turn_id = ? AND seq = ?",
            (json.dumps(intent), turn_id, seq),
        )


def forget_records(conn: sqlite3.Connection, since: list[tuple[str, int]]) -> None:
    """The state records (ledger/state_records.py) that may quote a redacted message: of
    each session's turns from the first that held one on, and of its forks and workers.
    A turn without its row has its record worked out again from its stored rows, which
    now say `[erased]`."""
    seen: set[str] = set()
    while since:
        session, at = since.pop()
        if session in seen:
            continue
        seen.add(session)
        conn.execute(
            "DELETE FROM turn_state WHERE turn_id IN"
            " (SELECT id FROM turns WHERE session_label = ? AND started_at >= ?)",
            (session, at),
        )
        conn.execute("DELETE FROM thread_seeds WHERE session_label = ?", (session,))
        since.extend(
            (str(r[0]), 0)
            for r in conn.execute("SELECT label FROM sessions WHERE parent_session = ?", (session,))
        )
    records = getattr(conn, "last_records", None)
    if records is not None:
        records.clear()


def _step_rest(conn: sqlite3.Connection, plan: Plan, counts: dict[str, int]) -> tuple[bool, Any]:
    """The sessions' own small tables, the sessions and the entities."""
    if plan.sessions:
        s, labels = marks(plan.sessions), plan.sessions
        conn.execute(
            f"DELETE FROM timer_firings WHERE timer_id IN"
            f" (SELECT id FROM timers WHERE session_label IN ({s}))",
            labels,
        )
        for table in ("timers", "session_history", "scratchpad", "session_aliases",
                      "adk_sessions", "person_activity", "threads", "thread_seeds",
                      "route_bindings", "session_leases"):  # fmt: skip
            conn.execute(f"DELETE FROM {table} WHERE session_label IN ({s})", labels)
        conn.execute(
            f"DELETE FROM bridge_notes WHERE session_label IN ({s}) OR merged_session IN ({s})",
            [*labels, *labels],
        )
        conn.execute(
            f"DELETE FROM dispatches WHERE parent_session IN ({s}) OR target_session IN ({s})",
            [*labels, *labels],
        )
        conn.execute(f"UPDATE sessions SET merged_into = NULL WHERE merged_into IN ({s})", labels)
        conn.execute(f"DELETE FROM sessions WHERE label IN ({s})", labels)
    e = marks(plan.entities)
    conn.execute(f"DELETE FROM contacts WHERE entity_id IN ({e})", plan.entities)
    conn.execute(f"UPDATE entities SET merged_into = NULL WHERE id IN ({e})", plan.entities)
    conn.execute(f"DELETE FROM entities WHERE id IN ({e})", plan.entities)
    return True, None


def _step_index(conn: sqlite3.Connection, plan: Plan, counts: dict[str, int]) -> tuple[bool, Any]:
    row = conn.execute(
        "SELECT index_merge FROM erasures WHERE entity_id = ?", (plan.entity,)
    ).fetchone()
    if row is not None and not row[0]:
        return True, None  # every delete of this erasure took its terms out of the index
    left = merge_index(conn, -1 if plan.cursor is None else int(plan.cursor))
    return left == 0, left


def merge_index(conn: sqlite3.Connection, left: int = -1) -> int:
    """The writer job that merges the full-text index FTS_PAGES_A_STEP pages further
    towards one segment, which leaves no deleted term behind: the merge steps still
    allowed (-1 at the first), 0 once it is done.

    A steady load adds a segment with every transaction, and a merge towards one
    segment may then never end: after as many steps as one rewrite of the whole index
    takes, the rest is done at once ('optimize'), a longer hold, but the last."""
    if getattr(conn, "full_text", None) is not None:
        return 0  # PostgreSQL's own index: its dead entries go with VACUUM
    if left < 0 and secure_index(conn) and not whole_merge_due(conn):
        return 0  # FTS5 secure-delete: deleted terms left the index as they went
    if left < 0:
        pages = int(conn.execute("SELECT count(*) FROM messages_fts_data").fetchone()[0])
        left = max(8, pages // FTS_PAGES_A_STEP)
    before = conn.total_changes
    conn.execute(
        "INSERT INTO messages_fts (messages_fts, rank) VALUES ('merge', ?)", (-FTS_PAGES_A_STEP,)
    )
    if conn.total_changes - before >= 2 and left > 1:
        return left - 1
    if conn.total_changes - before >= 2:
        conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")
    conn.execute("DELETE FROM index_upkeep")  # one segment: no word deleted before is left
    return 0


def whole_merge_due(conn: sqlite3.Connection) -> bool:
    """Whether words deleted before secure-delete was turned on may still lie in the
    SQLite index's old segments (migration 0033), for one whole merge to clear."""
    row = conn.execute("SELECT whole_merge_due FROM index_upkeep WHERE id = 1").fetchone()
    return row is not None and bool(row[0])


STEPS: tuple[Step, ...] = (
    # The outbox first: its rows name their turns, and it has no index by turn.
    _sweep("outbox", "out_id", _in_sessions("outbox")),
    _step_turns,
    _step_live,
    _sweep("queue_items", "seq", _in_sessions("queue_items")),
    _sweep("inbound", "id", _inbound),
    _sweep("messages", "id", _messages),
    _step_rest,
    _step_index,
)


def step(conn: sqlite3.Connection, entity: str) -> bool:
    """The writer job for one bounded step of `entity`'s erasure; False once its rows are
    gone (the shell then clears the bytes and calls `finish`)."""
    plan = plan_of(conn, entity)
    if plan is None or plan.step >= len(STEPS):
        return False
    # Only indexed rows may be deleted or changed (ledger/fts.py).
    index_new_messages(conn)
    counts = dict(plan.counts)
    done, cursor = STEPS[plan.step](conn, plan, counts)
    forget_deleted(conn)
    conn.execute(
        "UPDATE erasures SET step = ?, cursor = ?, counts = ? WHERE entity_id = ?",
        (plan.step + 1 if done else plan.step, None if done else json.dumps(cursor),
         json.dumps(counts), entity),
    )  # fmt: skip
    return plan.step + 1 < len(STEPS) or not done


def finish(conn: sqlite3.Connection, entity: str, now: int) -> dict[str, int]:
    """The writer job that closes an erasure: its lists go, its counts stay."""
    plan = plan_of(conn, entity)
    if plan is None:
        row = conn.execute("SELECT counts FROM erasures WHERE entity_id = ?", (entity,)).fetchone()
        if row is None:
            raise NotFound(f"no erasure of {entity!r}", field="entity")
        return dict(json.loads(row[0]))
    conn.execute(
        "UPDATE erasures SET entities = NULL, sessions = NULL, senders = NULL, cursor = NULL,"
        " finished_at = ? WHERE entity_id = ?",
        (now, entity),
    )
    return plan.counts


def truncate_wal(path: Path, key: Key | None = None) -> None:
    """Checkpoint the whole WAL into the file and truncate it to nothing."""
    conn = connect(path, key=key)
    try:
        for _ in range(CHECKPOINT_TRIES):
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                return
            time.sleep(0.02)
        raise LedgerError(f"could not checkpoint the WAL of {path}: readers keep it busy")
    finally:
        conn.close()
