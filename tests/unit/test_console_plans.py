"""The console's reads find their rows through indexes on both ledgers: no page sorts or
scans every session, turn or message (bench/console.py times them on a large ledger).

On SQLite every statement a page runs is asked for its plan (`EXPLAIN QUERY PLAN`);
on PostgreSQL the page of sessions, the one read ordered over a whole table, is
asked with enough rows that a sort would be the planner's choice without the index.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from ledger import console, queries, timers


def _session(conn: sqlite3.Connection, n: int) -> tuple[str, str]:
    label, turn = f"dm:ent_{n}", f"turn{n}"
    conn.execute(
        "INSERT INTO sessions (label, kind, head_turn_id, origin, created_at, updated_at)"
        " VALUES (?, 'dm', ?, 'inbound', ?, ?)",
        (label, turn, n, n),
    )
    conn.execute(
        "INSERT INTO turns (id, session_label, type, status, engine, started_at, completed_at)"
        " VALUES (?, ?, 'turn', 'completed', 'echo', ?3, ?3)",
        (turn, label, n),
    )
    return label, turn


def test_every_statement_of_every_page_reads_through_an_index(conn: sqlite3.Connection) -> None:
    label, turn = _session(conn, 1)
    _session(conn, 2)
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    console.sessions_page(conn, 101, 900)  # the tenth page
    console.sessions_page(conn, 101, 0)
    console.session_tree(conn, label, 500)
    console.turn_detail(conn, label, turn)
    queries.counts(conn)  # the operations page
    queries.open_items_untouched_since(conn, 0)
    timers.list_live(conn, None)
    conn.set_trace_callback(None)
    assert len(seen) >= 12
    for statement in seen:
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + statement)]
        scans = [step for step in plan if step.startswith("SCAN ")]
        # A scan is of an index (in its order, up to the LIMIT), or of the page's own
        # materialized rows (`p`), never of a table.
        assert all("INDEX" in step or step == "SCAN p" for step in scans), (statement, plan)
    page = next(s for s in seen if "LIMIT 101 OFFSET 900" in s)
    plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + page)]
    assert "SCAN sessions USING COVERING INDEX sessions_updated" in plan


@pytest.mark.postgres
def test_the_page_of_sessions_is_read_from_its_index_on_postgresql(
    pg_template: tuple[Any, str],
) -> None:
    from ledger.postgres import devcluster
    from ledger.postgres.connection import PgConnection

    cluster, template = pg_template
    pg = PgConnection(devcluster.fresh_database(cluster, "console_plans", template), reader=False)
    try:
        pg.execute(
            "INSERT INTO sessions (label, kind, origin, created_at, updated_at)"
            " SELECT 'dm:ent_' || n, 'dm', 'inbound', n, n FROM generate_series(1, 20000) n"
        )
        pg.execute("ANALYZE sessions")
        for offset in (0, 900):
            plan = "\n".join(
                str(row[0]) for row in pg.execute("EXPLAIN " + console.SESSIONS_PAGE, (101, offset))
            )
            assert "Index Only Scan using sessions_updated on sessions" in plan, plan
            assert "Seq Scan on sessions" not in plan, plan
    finally:
        pg.close()
