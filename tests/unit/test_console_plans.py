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


class _Recording:
    """A connection that notes each statement it runs, with its parameters."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.statements: list[tuple[str, Any]] = []

    def execute(self, sql: str, args: Any = ()) -> sqlite3.Cursor:
        self.statements.append((sql, args))
        return self.conn.execute(sql, args)


def test_every_statement_of_every_page_reads_through_an_index(conn: sqlite3.Connection) -> None:
    label, turn = _session(conn, 1)
    _session(conn, 2)
    # Each statement as it runs: prepared with its parameters, as the planner sees it
    # (a LIMIT written out as a number is planned otherwise).
    seen = _Recording(conn)
    console.sessions_page(seen, 101, 900)  # type: ignore[arg-type]  # the tenth page
    console.sessions_page(seen, 101, 0)  # type: ignore[arg-type]
    console.session_tree(seen, label, 500)  # type: ignore[arg-type]
    console.turn_detail(seen, label, turn)  # type: ignore[arg-type]
    queries.counts(seen)  # type: ignore[arg-type]  # the operations page
    queries.open_items_untouched_since(seen, 0)  # type: ignore[arg-type]
    timers.list_live(seen, None)  # type: ignore[arg-type]
    assert len(seen.statements) >= 12
    for statement, args in seen.statements:
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + statement, args)]
        scans = [step for step in plan if step.startswith("SCAN ")]
        # A scan is of an index (in its order, up to the LIMIT), or of the page's own
        # materialized rows (`p`), never of a table.
        assert all("INDEX" in step or step == "SCAN p" for step in scans), (statement, plan)
    plan = [
        row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + console.SESSIONS_PAGE, (101, 900))
    ]
    assert "SEARCH sessions USING INDEX sessions_recent (updated_block>?)" in plan


@pytest.mark.postgres
def test_the_page_of_sessions_is_read_from_its_index_on_postgresql(
    pg_template: tuple[Any, str],
) -> None:
    from ledger.postgres import devcluster
    from ledger.postgres.connection import PgConnection

    cluster, template = pg_template
    pg = PgConnection(devcluster.fresh_database(cluster, "console_plans", template), reader=False)
    try:
        pg.execute(  # changed a minute apart: about 17 to a block (ledger/recent.py)
            "INSERT INTO sessions (label, kind, origin, created_at, updated_at, updated_block)"
            " SELECT 'dm:ent_' || n, 'dm', 'inbound', n, n * 60000, (n * 60000) >> 20"
            " FROM generate_series(1, 20000) n"
        )
        pg.execute("ANALYZE sessions")
        for offset in (0, 900):
            plan = "\n".join(
                str(row[0]) for row in pg.execute("EXPLAIN " + console.SESSIONS_PAGE, (101, offset))
            )
            assert "Index Scan using sessions_recent on sessions" in plan, plan
            assert "Seq Scan on sessions" not in plan, plan
    finally:
        pg.close()
