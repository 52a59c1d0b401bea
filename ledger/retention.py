"""Expiring old turns (`[retention] keep_days`, `Store.expire`): writer jobs that turn
turns ended before a cutoff into stubs, a bounded batch at a time.

A stub keeps the turn's id, parent, type, status and times, so trees, forks,
threads and heads stay whole; its messages, tool calls, events, state record,
compaction summary and file snapshots go, with the blobs no other snapshot names,
its delivered replies (after the batches: `expire_outbox`), and the text of the
inbound messages it answered (the inbound row itself stays: a message id is never
accepted twice). The head of
every session, the head each earlier thread ended with, the turn a thread
was carried over from and the latest compaction of every session are kept
whole, so a session goes on as before. Batches sweep the turns in id order
from a cursor the caller keeps, and each stops once it has used its time budget,
so it holds the writer for a bounded time whatever its turns hold, and an expiry
cut off by a stop simply runs again. The full-text index and the WAL
are cleared afterwards as for an erasure (ledger/erasure.py `merge_index`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping

from ledger.closing import forget_session_words
from ledger.erasure import SWEEP_A_STEP, digests_where, drop_unnamed_blobs, forget_records, marks
from ledger.fts import forget_deleted, index_new_messages

EXPIRED = "[expired]"  # a closing summary that quoted an expired turn
TURNS_LOOKED_AT = 500  # turns a batch looks at (most are young, or stubs already)
BATCH_BUDGET_S = 0.025  # a batch's own work; its commit and the writer's other jobs come on top
MAX_GROUP = 64  # turns expired together
BY_TURN = ("messages", "tool_calls", "turn_events", "turn_progress", "turn_state",
           "file_snapshots", "compactions")  # fmt: skip


def _kept(conn: sqlite3.Connection, ids: list[str]) -> set[str]:
    """Among `ids`, the turns that stay whole."""
    t = marks(ids)
    kept = {
        str(r[0])
        for r in conn.execute(f"SELECT head_turn_id FROM sessions WHERE head_turn_id IN ({t})", ids)
    }
    for column in ("prev_head", "carry_turn_id"):
        kept.update(
            str(r[0])
            for r in conn.execute(f"SELECT {column} FROM threads WHERE {column} IN ({t})", ids)
        )
    kept.update(
        str(r[0])
        for r in conn.execute(
            f"SELECT c.turn_id FROM compactions c WHERE c.turn_id IN ({t}) AND NOT EXISTS"
            " (SELECT 1 FROM compactions l WHERE l.session_label = c.session_label"
            " AND l.created_at > c.created_at)",
            ids,
        )
    )
    return kept


def expire_batch(
    conn: sqlite3.Connection,
    cutoff: int | None,
    after: str | None,
    now: int,
    cutoffs: Mapping[str, int | None] | None = None,
    budget_s: float = BATCH_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[int, str | None]:
    """The writer job for one batch: of the next TURNS_LOOKED_AT turns after `after`,
    expire those that ended before their session's cutoff (its own in `cutoffs`, else
    `cutoff`; None: kept), a few at a time until `budget_s` is used. (How many it
    expired, where the next batch goes on: None once the sweep has passed the last
    turn.)

    The first few go one by one; each next group is sized from the time a turn took so
    far to fill half of what is left of the budget, so a batch of heavy turns (many
    messages, index entries, files) stops after one of them and one of light turns
    takes many."""
    started = clock()
    rows = conn.execute(
        "SELECT id, completed_at, expired_at, session_label FROM turns"
        + (" WHERE id > ?" if after is not None else "")
        + " ORDER BY id LIMIT ?",
        [*([after] if after is not None else []), TURNS_LOOKED_AT],
    ).fetchall()
    if not rows:
        return 0, None
    own = cutoffs or {}
    old = [
        str(r[0])
        for r in rows
        if r[2] is None and (at := own.get(str(r[3]), cutoff)) is not None and int(r[1]) < at
    ]
    kept = _kept(conn, old) if old else set()
    expirable = [t for t in old if t not in kept]
    expired, size = 0, 1
    while expirable:
        group, expirable = expirable[:size], expirable[size:]
        _expire(conn, group, now)
        expired += len(group)
        spent = clock() - started
        if spent >= budget_s:
            return expired, group[-1]  # the rest of the rows, in the next batch
        size = max(1, min(MAX_GROUP, int((budget_s - spent) / 2 / (spent / expired or 1e-6))))
    return expired, (str(rows[-1][0]) if len(rows) == TURNS_LOOKED_AT else None)


def _expire(conn: sqlite3.Connection, ids: list[str], now: int) -> None:
    t = marks(ids)
    index_new_messages(conn)  # only indexed rows may be deleted (ledger/fts.py)
    items = [
        str(r[0])
        for r in conn.execute(
            f"SELECT item_id FROM messages WHERE turn_id IN ({t}) AND item_id IS NOT NULL", ids
        )
    ]
    if items:
        i = marks(items)
        conn.execute(
            "UPDATE inbound SET text = '', sender_name = NULL, meta = NULL WHERE id IN"
            f" (SELECT inbound_id FROM queue_items WHERE id IN ({i}))",
            items,
        )
        conn.execute(f"UPDATE queue_items SET payload = NULL WHERE id IN ({i})", items)
    digests = digests_where(conn, f"turn_id IN ({t})", ids)
    since = conn.execute(
        f"SELECT session_label, min(started_at) FROM turns WHERE id IN ({t})"
        " GROUP BY session_label",
        ids,
    ).fetchall()
    # The records of the turns after them may quote them; they are worked out again.
    forget_records(conn, [(str(s), int(at)) for s, at in since])
    forget_session_words(conn, [str(s) for s, _ in since], EXPIRED)
    for table in BY_TURN:
        conn.execute(f"DELETE FROM {table} WHERE turn_id IN ({t})", ids)
    conn.execute(
        "UPDATE turns SET title = NULL, title_source = NULL, output = NULL, error = NULL,"
        f" outcome = NULL, summary = NULL, metadata = NULL, expired_at = ? WHERE id IN ({t})",
        [now, *ids],
    )
    drop_unnamed_blobs(conn, digests)
    forget_deleted(conn)


def expire_outbox(conn: sqlite3.Connection, after: str | None) -> str | None:
    """The writer job that removes the delivered replies of expired turns among the next
    SWEEP_A_STEP outbox rows after `after` (the outbox has no index by turn, so it is
    swept in key order); where the next goes on, None once through."""
    rows = conn.execute(
        "SELECT out_id FROM outbox"
        + (" WHERE out_id > ?" if after is not None else "")
        + " ORDER BY out_id LIMIT ?",
        [*([after] if after is not None else []), SWEEP_A_STEP],
    ).fetchall()
    if not rows:
        return None
    last = str(rows[-1][0])
    conn.execute(
        "DELETE FROM outbox WHERE out_id <= ?"
        + (" AND out_id > ?" if after is not None else "")
        + " AND status != 'pending' AND turn_id IN"
        " (SELECT id FROM turns WHERE id = outbox.turn_id AND expired_at IS NOT NULL)",
        [last, *([after] if after is not None else [])],
    )
    return last if len(rows) == SWEEP_A_STEP else None


def session_routes(
    conn: sqlite3.Connection,
) -> list[tuple[str, str | None, str | None, str | None, str | None]]:
    """Every session with what routed its latest message in: (label, parent session,
    channel, peer kind, sender id), the last three None for a session no message came
    into (a worker, a fork, the library's). Read on a reader, once a run."""
    latest = {
        str(r[0]): (str(r[1]), str(r[2]), str(r[3]))
        for r in conn.execute(
            "SELECT i.session_label, i.channel, i.peer_kind, i.sender_id FROM inbound i"
            " JOIN (SELECT session_label, max(id) AS id FROM inbound GROUP BY session_label) l"
            " ON l.id = i.id"
        )
    }
    return [
        (
            str(label),
            None if parent is None else str(parent),
            *latest.get(str(label), (None, None, None)),
        )
        for label, parent in conn.execute("SELECT label, parent_session FROM sessions")
    ]
