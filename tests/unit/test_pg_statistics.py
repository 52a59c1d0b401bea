"""PG migration 0020 on a ledger that had planner statistics already: the sample
values of its text columns leave the catalog when a superuser migrates it, a WARNING
says so when its owner alone does, and no ANALYZE gathers them again."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.postgres.vacuum import vacuum
from plumbing.ids import new_id

pytestmark = pytest.mark.postgres
OWNER = "ledger_owner"


@pytest.fixture(scope="module")
def cluster(pg_template: tuple[Any, str]) -> Any:
    """The test session's cluster: these tests make databases of their own on it."""
    return pg_template[0]


def _database(cluster: Any, name: str, owner: str | None = None) -> str:
    import psycopg

    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if owner is not None:
            admin.execute(
                f"DO $$ BEGIN CREATE ROLE {owner} LOGIN; EXCEPTION WHEN duplicate_object"
                " THEN NULL; END $$"
            )
        admin.execute(f'CREATE DATABASE "{name}"' + (f" OWNER {owner}" if owner else ""))
    dsn = str(cluster.dsn(name))
    return dsn if owner is None else dsn.replace("postgresql://postgres@", f"postgresql://{owner}@")


@pytest.fixture
def warned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The server's warnings, as the ledger's PostgreSQL connections log them."""
    from ledger.postgres import connection

    said: list[str] = []

    class Log:
        def warning(self, event: str, **fields: object) -> None:
            said.append(f"{event}: {fields['notice']}")

    monkeypatch.setattr(connection, "log", Log())
    return said


def _migrate(dsn: str, through: int | None) -> None:
    """Apply the migrations through `through` (None: all) as `dsn`'s role."""
    from ledger.postgres import schema
    from ledger.postgres.connection import PgConnection

    conn = PgConnection(dsn, reader=False)
    try:
        schema.migrate(conn, through)
    finally:
        conn.close()


def _sampled(dsn: str, marker: str) -> list[str]:
    """The columns whose planner statistics hold `marker` (`pg_stats`, as text)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")
        rows = conn.execute(
            "SELECT tablename || '.' || attname FROM pg_stats"
            " WHERE schemaname = 'public' AND (most_common_vals::text LIKE %s"
            " OR histogram_bounds::text LIKE %s OR most_common_elems::text LIKE %s)"
            " ORDER BY 1",
            (f"%{marker}%",) * 3,
        ).fetchall()
    return [row[0] for row in rows]


def _write(dsn: str, marker: str) -> None:
    """Timers whose text holds `marker`, in a session of their own."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO sessions (label, kind, origin, status, created_at, updated_at)"
            " VALUES ('dm:x', 'dm', 'test', 'active', 0, 0) ON CONFLICT DO NOTHING"
        )
        for n in range(5):
            conn.execute(
                "INSERT INTO timers (id, session_label, text, first_at, created_at, updated_at)"
                " VALUES (%s, 'dm:x', %s, 0, 0, 0)",
                (new_id(), f"remind me {marker} {n}"),
            )


def _catalog_bytes(cluster: Any, dsn: str) -> bytes:
    """The file of the database's `pg_statistic`, after a CHECKPOINT."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        row = conn.execute("SELECT pg_relation_filepath('pg_catalog.pg_statistic')").fetchone()
    assert row is not None
    return b"".join(p.read_bytes() for p in (cluster.data).glob(f"{row[0]}*"))


def test_a_superuser_s_migration_deletes_the_statistics_gathered_before(
    cluster: Any, warned: list[str]
) -> None:
    dsn = _database(cluster, "stats_super")
    marker = f"zqx{new_id().lower()}"
    _migrate(dsn, through=19)
    _write(dsn, marker)
    assert _sampled(dsn, marker) == ["timers.text"]  # what the migration is for
    assert marker.encode() in _catalog_bytes(cluster, dsn)
    _migrate(dsn, through=None)
    assert warned == []
    assert _sampled(dsn, marker) == []
    vacuum(dsn)  # as after an erasure or an expiry
    assert marker.encode() not in _catalog_bytes(cluster, dsn)
    _write(dsn, f"{marker}b")
    assert _sampled(dsn, marker) == []


def test_the_owner_s_migration_stops_gathering_and_warns_of_what_stays(
    cluster: Any, warned: list[str]
) -> None:
    dsn = _database(cluster, "stats_owner", owner=OWNER)
    marker = f"zqx{new_id().lower()}"
    _migrate(dsn, through=19)
    _write(dsn, marker)
    assert _sampled(dsn, marker) == ["timers.text"]
    _migrate(dsn, through=None)
    assert warned == [
        "the PostgreSQL server warned: the ledger's planner statistics of text columns"
        " gathered before now stay in pg_statistic: a superuser may delete them"
        " (docs/forgetting.md)"
    ]
    assert _sampled(dsn, marker) == ["timers.text"]  # left for a superuser, as it says
    _write(dsn, f"{marker}b")
    assert _sampled(dsn, f"{marker}b") == []


def test_the_owner_s_clean_up_runs_and_another_role_s_skips_are_logged(
    cluster: Any, warned: list[str]
) -> None:
    import psycopg

    owner_dsn = _database(cluster, "stats_other", owner=OWNER)
    _migrate(owner_dsn, through=None)
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute(
            "DO $$ BEGIN CREATE ROLE other_role LOGIN; EXCEPTION WHEN duplicate_object"
            " THEN NULL; END $$"
        )
    vacuum(owner_dsn)
    assert warned == []
    vacuum(owner_dsn.replace(f"{OWNER}@", "other_role@"))
    assert (
        'the PostgreSQL server warned: skipping "pg_statistic" --- only'
        " superuser or database owner can vacuum it" in warned
    )
    assert len(warned) > 1 and all(" server warned: " in w for w in warned)  # the tables too
