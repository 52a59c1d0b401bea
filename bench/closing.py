"""How long `session.close` holds the writer: its job on a thread of N turns, with a
mechanical summary, on SQLite in this process (rolled back, so each size starts
alike).

    .venv/bin/python -m bench.closing
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from ledger.closing import close_session
from ledger.db import connect, migrate


def main() -> None:
    for n in (100, 1000, 10000):
        run(n)


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
