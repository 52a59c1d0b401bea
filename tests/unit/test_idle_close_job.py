"""ledger/closing.py's idle close on one connection: the writer job decides again
what the read found, so a session a person wrote to since, one that got work, or one
closed meanwhile stays as it is."""

from __future__ import annotations

import sqlite3

from core.closing import IdleClose
from ledger import closing

POLICY = IdleClose(60.0, (("keeper", 0.0),))
NOW = 1_000_000_000


def session(
    conn: sqlite3.Connection, label: str, heard_at: int, persona: str | None = None
) -> None:
    conn.execute(
        "INSERT INTO sessions (label, kind, origin, status, persona, created_at, updated_at)"
        " VALUES (?, 'dm', 'inbound', 'active', ?, 1, 1)",
        (label, persona),
    )
    conn.execute("INSERT INTO person_activity (session_label, at) VALUES (?, ?)", (label, heard_at))


def test_the_job_closes_only_what_is_still_idle_and_free(conn: sqlite3.Connection) -> None:
    old = NOW - 120_000
    for label in ("idle", "spoke-since", "kept", "got-work", "closed-meanwhile"):
        session(conn, label, old, "keeper" if label == "kept" else None)
    found = closing.idle_candidates(conn, POLICY, NOW)
    assert sorted(found) == ["closed-meanwhile", "got-work", "idle", "spoke-since"]
    # Between the read and the job:
    conn.execute("UPDATE person_activity SET at = ? WHERE session_label = 'spoke-since'", (NOW,))
    conn.execute(
        "INSERT INTO timers (id, session_label, text, first_at, next_at, created_at,"
        " updated_at) VALUES ('t1', 'got-work', 'later', ?, ?, 1, 1)",
        (NOW + 1000, NOW + 1000),
    )
    closing.close_session(conn, "closed-meanwhile", "by hand", NOW - 1)
    closed = closing.close_idle(conn, [*found, "kept", "no-such-session"], POLICY, NOW)
    assert [c["session"] for c in closed] == ["idle"]
    assert closed[0]["source"] == "mechanical" and closed[0]["ended_at"] == NOW
    status = dict(conn.execute("SELECT label, status FROM sessions").fetchall())
    assert status == {
        "idle": "closed",
        "spoke-since": "active",
        "kept": "active",
        "got-work": "active",
        "closed-meanwhile": "closed",
    }
    assert closing.idle_candidates(conn, POLICY, NOW) == []
