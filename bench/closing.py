"""How long `session.close` holds the writer: its job on a thread of N turns, with a
mechanical summary, on SQLite in this process (rolled back, so each size starts
alike). And the idle close's search (`idle_candidates`, a read) over a ledger of
many sessions, few of them active, with the `sessions_active` index and without it,
the two timed in alternation.

    .venv/bin/python -m bench.closing
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from core.closing import IdleClose
from ledger.closing import close_session, idle_candidates
from ledger.db import connect, migrate

NOW = 10**12


def main() -> None:
    for n in (100, 1000, 10000):
        run(n)
    for sessions, active in ((10_000, 1_000), (100_000, 1_000), (100_000, 100_000)):
        idle_search(sessions, active)


def idle_search(sessions: int, active: int, tries: int = 15) -> None:
    """`sessions` sessions a person wrote to, the newest `active` of them active and
    none idle yet (the usual round); median ms of the search, index on and off."""
    conn = connect(Path(tempfile.mkdtemp()) / "ledger.db")
    migrate(conn)
    for i in range(sessions):
        label, is_active = f"dm:ent_{i:08d}", i >= sessions - active
        conn.execute(
            "INSERT INTO sessions (label, kind, origin, status, created_at, updated_at)"
            " VALUES (?, 'dm', 'inbound', ?, 0, 0)",
            (label, "active" if is_active else "closed"),
        )
        at = NOW - (1000 if is_active else 10**9)
        conn.execute("INSERT INTO person_activity (session_label, at) VALUES (?, ?)", (label, at))
    conn.commit()
    conn.execute("ANALYZE")
    policy = IdleClose(3600.0)
    took: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(tries):
        for indexed in (True, False):
            conn.execute("BEGIN")
            if not indexed:
                conn.execute("DROP INDEX sessions_active")
            start = time.perf_counter()
            idle_candidates(conn, policy, NOW)
            took[indexed].append((time.perf_counter() - start) * 1000)
            conn.execute("ROLLBACK")
    print(
        f"{sessions:>7} sessions, {active:>7} active: idle search median"
        f" {statistics.median(took[True]):.2f} ms indexed,"
        f" {statistics.median(took[False]):.2f} ms without sessions_active"
    )
    conn.close()


def run(n: int, tries: int = 5) -> None:
    """Build a thread of `n` titled turns; print the best and worst of `tries` closes."""
    conn = connect(Path(tempfile.mkdtemp()) / "ledger.db")
    migrate(conn)
    conn.execute(
        "INSERT INTO sessions (label, kind, origin, status, created_at, updated_at)"
        " VALUES ('s', 'dm', 'inbound', 'active', 0, 0)"
    )
    parent = None
    for i in range(n):
        turn = f"t{i:06d}"
        conn.execute(
            "INSERT INTO turns (id, session_label, parent_id, type, status, started_at,"
            " completed_at, title) VALUES (?, 's', ?, 'turn', 'completed', 0, 0, ?)",
            (turn, parent, f"title {i}"),
        )
        parent = turn
    conn.execute("UPDATE sessions SET head_turn_id = ? WHERE label = 's'", (parent,))
    conn.commit()
    took = []
    for _ in range(tries):
        start = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        close_session(conn, "s", None, 1)
        conn.execute("ROLLBACK")
        took.append((time.perf_counter() - start) * 1000)
    print(f"{n:>6} turns: close job {min(took):.2f} ms best, {max(took):.2f} ms worst of {tries}")
    conn.close()


if __name__ == "__main__":
    main()
