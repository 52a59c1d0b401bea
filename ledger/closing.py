"""Closing a session (`session.close`, the library's `end`): one writer job.

A session closes only when nothing is pending in it: no queued or running item and
no live timer; otherwise the job answers `Conflict` naming what waits and writes
nothing, so a turn in flight always commits into an open session. Closing sets the
status `closed`, `ended_at` and the closing summary (the one given, else a
mechanical one of the thread's turn titles: core/closing.py) in one statement. It
clears the writer's resolution caches, so the next message for the session's key
resolves afresh and opens the successor (ledger/ingest.py). Nothing else brings a
closed session work: a timer or a dispatch to it is refused (`refuse_closed`). The
words a session row keeps of its messages (title, slug, closing summary) go when
those messages are erased or expire (`forget_session_words`).

Closing idle sessions (core/closing.py `IdleClose`) takes two steps: a read finds up
to `IDLE_A_JOB` of them, the longest silent first, leaving out any with pending work
so they never stand in front of the ones that can close (`idle_candidates`); then a
writer job closes each as `close_session` does, with a mechanical summary, after
checking again that it is still active, still idle and still without pending work
(`close_idle`). The search holds a reader, never the writer.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from core.closing import Held, IdleClose, close_refusal, idle_cutoff, mechanical_summary
from ledger.erased import refuse_erased
from ledger.port.errors import Conflict, NotFound
from ledger.recent import block_of

TITLES_READ = 200  # the latest turns a mechanical summary is made of: a bounded walk
IDLE_A_JOB = 50  # sessions one `close_idle` job closes at most


def resolve(conn: sqlite3.Connection, name: str) -> str:
    """A session's label from its label or an alias; `NotFound` otherwise."""
    if conn.execute("SELECT 1 FROM sessions WHERE label = ?", (name,)).fetchone():
        return name
    row = conn.execute(
        "SELECT session_label FROM session_aliases WHERE alias = ?", (name,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no session or alias {name!r}", field="session")
    return str(row[0])


def close_session(
    conn: sqlite3.Connection, name: str, summary: str | None, now: int
) -> dict[str, Any]:
    """The writer job: close session `name` (a label or an alias)."""
    label = resolve(conn, name)
    status, merged_into, ended_at, head = conn.execute(
        "SELECT status, merged_into, ended_at, head_turn_id FROM sessions WHERE label = ?",
        (label,),
    ).fetchone()
    if status == "closed":
        raise Conflict(f"{label} is already closed (at {ended_at} ms)", field="session")
    if status != "active":
        where = f" into {merged_into}" if merged_into else ""
        raise Conflict(
            f"{label} is {status}{where}: only an active session closes", field="session"
        )
    refusal = close_refusal(*pending(conn, label))
    if refusal is not None:
        raise Conflict(f"{label}: {refusal}", field="session")
    source = "given"
    if summary is None or not summary.strip():
        summary, source = mechanical_summary(*thread_titles(conn, head)), "mechanical"
    conn.execute(
        "UPDATE sessions SET status = 'closed', ended_at = ?, closing_summary = ?,"
        " updated_at = ?, updated_block = ? WHERE label = ?",
        (now, summary, now, block_of(now), label),
    )
    cache = getattr(conn, "identity", None)
    if cache is not None:  # the writer's key -> label caches now lead elsewhere
        cache.clear_resolution()
    return {"session": label, "ended_at": now, "closing_summary": summary, "source": source}


def idle_candidates(conn: sqlite3.Connection, policy: IdleClose, now: int) -> list[str]:
    """A read: up to IDLE_A_JOB sessions idle past their limit at `now` and with
    nothing pending, the longest silent first (`close_idle` decides again)."""
    found: list[str] = []
    for personas, limit in policy.groups():
        if personas is None:
            others = policy.overridden()
            marks = ",".join("?" * len(others))
            which = f" AND (s.persona IS NULL OR s.persona NOT IN ({marks}))" if others else ""
            params: list[Any] = list(others)
        else:
            which, params = " AND s.persona = ?", [personas[0]]
        rows = conn.execute(
            "SELECT s.label FROM sessions s JOIN person_activity a ON a.session_label = s.label"
            f" WHERE s.status = 'active' AND a.at <= ?{which}"
            " AND NOT EXISTS (SELECT 1 FROM queue_items q WHERE q.session_label = s.label"
            " AND q.status IN ('queued', 'running'))"
            " AND NOT EXISTS (SELECT 1 FROM timers t WHERE t.session_label = s.label"
            " AND t.status = 'live')"
            " ORDER BY a.at, s.label LIMIT ?",
            [idle_cutoff(limit, now), *params, IDLE_A_JOB - len(found)],
        ).fetchall()
        found.extend(str(r[0]) for r in rows)
        if len(found) >= IDLE_A_JOB:
            break
    return found


def close_idle(
    conn: sqlite3.Connection, labels: list[str], policy: IdleClose, now: int
) -> list[dict[str, Any]]:
    """The writer job: close each of `labels` that is still active, idle past its
    limit at `now` and without pending work; what `close_session` answers for each."""
    closed: list[dict[str, Any]] = []
    for label in labels:
        row = conn.execute(
            "SELECT s.status, s.persona, a.at FROM sessions s"
            " JOIN person_activity a ON a.session_label = s.label WHERE s.label = ?",
            (label,),
        ).fetchone()
        if row is None or row[0] != "active":
            continue
        limit = policy.limit_for(row[1])
        if limit <= 0 or int(row[2]) > idle_cutoff(limit, now):
            continue  # a person wrote since the read
        if close_refusal(*pending(conn, label)) is None:
            closed.append(close_session(conn, label, None, now))
    return closed


def refuse_closed(conn: sqlite3.Connection, label: str, field: str) -> None:
    """`Conflict` if session `label` is closed: a timer or a dispatch that would bring
    it a new item is refused, as a close with pending work is; `NotFound` if it is
    being erased."""
    if refuse_erased(conn, label, field) == "closed":
        raise Conflict(f"{label} is closed: it takes no more work", field=field)


def forget_session_words(conn: sqlite3.Connection, labels: list[str], marker: str) -> None:
    """A message of these sessions was erased or expired: the words a session row may
    hold of it go too: the title and slug a daemon session took from its first
    message, and its closing summary (made of turn titles, or given), now `marker`."""
    if not labels:
        return
    marks = ",".join("?" * len(labels))
    conn.execute(
        "UPDATE sessions SET title = NULL, slug = NULL WHERE origin = 'inbound'"
        f" AND (title IS NOT NULL OR slug IS NOT NULL) AND label IN ({marks})",
        labels,
    )
    conn.execute(
        f"UPDATE sessions SET closing_summary = ? WHERE closing_summary IS NOT NULL"
        f" AND label IN ({marks})",
        [marker, *labels],
    )


def pending(conn: sqlite3.Connection, label: str) -> tuple[int, int, int]:
    """(queued items, running items, live timers) of the session."""
    queued, running = conn.execute(
        "SELECT coalesce(sum(CASE WHEN status = 'queued' THEN 1 ELSE 0 END), 0),"
        " coalesce(sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END), 0)"
        " FROM queue_items WHERE session_label = ? AND status IN ('queued', 'running')",
        (label,),
    ).fetchone()
    timers = conn.execute(
        "SELECT count(*) FROM timers WHERE session_label = ? AND status = 'live'", (label,)
    ).fetchone()[0]
    return int(queued), int(running), int(timers)


def thread_titles(conn: sqlite3.Connection, head: str | None) -> tuple[list[str | None], int, bool]:
    """The titles of the thread's latest turns (not compactions), oldest first; how
    many; and whether older ones were left unread (the walk stops after TITLES_READ
    turns, so a close holds the writer for a bounded time)."""
    if head is None:
        return [], 0, False
    rows = conn.execute(
        "WITH RECURSIVE chain(id, depth) AS (SELECT ?, 0 UNION ALL"
        " SELECT t.parent_id, c.depth + 1 FROM turns t JOIN chain c ON t.id = c.id"
        " WHERE t.parent_id IS NOT NULL AND c.depth < ?)"
        " SELECT t.title, t.type, t.parent_id FROM chain c JOIN turns t ON t.id = c.id"
        " ORDER BY c.depth DESC",
        (head, TITLES_READ - 1),
    ).fetchall()
    more = len(rows) == TITLES_READ and rows[0][2] is not None
    titles = [r[0] for r in rows if r[1] == "turn"]
    return titles, len(titles), more


def held(conn: sqlite3.Connection, label: str) -> Held | None:
    """What holds `label`, for the successor walk (core/closing.py)."""
    row = conn.execute("SELECT status, extends FROM sessions WHERE label = ?", (label,)).fetchone()
    if row is not None:
        return Held(str(row[0]), row[1])
    if conn.execute("SELECT 1 FROM session_aliases WHERE alias = ?", (label,)).fetchone():
        return Held("alias", None)
    return None
