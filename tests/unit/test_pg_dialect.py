"""The SQLite-to-PostgreSQL spelling of the ledger's statements (ledger/postgres/dialect.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.postgres.dialect import translate


def test_placeholders_become_psycopgs_and_percent_is_doubled() -> None:
    s = translate("SELECT a FROM t WHERE b = ? AND c LIKE '50%' AND d = ?")
    assert s.sql == "SELECT a FROM t WHERE b = %s AND c ILIKE '50%%' AND d = %s"
    assert s.param_order is None and s.rowid_column is None


def test_a_question_mark_inside_quotes_is_text() -> None:
    assert translate("SELECT 'why?' WHERE x = ?").sql == "SELECT 'why?' WHERE x = %s"
    assert translate("SELECT 'it''s ?' , ?").sql == "SELECT 'it''s ?' , %s"


def test_null_safe_equality_is_spelled_out() -> None:
    assert translate("WHERE a IS ? AND b IS NOT ?").sql == (
        "WHERE a IS NOT DISTINCT FROM %s AND b IS DISTINCT FROM %s"
    )
    assert translate("WHERE a IS NULL AND b IS NOT NULL").sql == (
        "WHERE a IS NULL AND b IS NOT NULL"
    )


def test_numbered_placeholders_take_their_argument_each_time() -> None:
    s = translate("SELECT ?1 WHERE a = ?2 AND b = ?1")
    assert s.sql == "SELECT %s WHERE a = %s AND b = %s"
    assert s.param_order == (0, 1, 0)


def test_an_insert_into_a_numbered_table_returns_its_key() -> None:
    s = translate("INSERT INTO queue_items (id) VALUES (?)")
    assert s.sql.endswith(" RETURNING seq") and s.rowid_column == "seq"
    assert translate("INSERT INTO messages (x) VALUES (?) RETURNING id").rowid_column is None
    assert translate("INSERT INTO sessions (label) VALUES (?)").rowid_column is None


def test_json_keys_and_begin() -> None:
    assert translate("SELECT 1 WHERE payload ->> '$.channel' = ?").sql == (
        "SELECT 1 WHERE (payload::jsonb ->> 'channel') = %s"
    )
    assert translate("BEGIN IMMEDIATE").sql == "BEGIN"


def test_the_translation_is_cached() -> None:
    sql = "SELECT count(*) FROM inbound WHERE channel = ?"
    assert translate(sql) is translate(sql)


@given(st.lists(st.sampled_from(["?", "a", " ", "=", "%", "'x'", "'?%'", ","]), max_size=30))
def test_placeholders_outside_quotes_are_counted_once_each(parts: list[str]) -> None:
    sql = "SELECT " + "".join(parts)
    out = translate(sql).sql
    marks = "".join(p for p in parts if p == "?")
    assert out.count("%s") == len(marks)
    # Every % that is not a placeholder is doubled, so psycopg reads none as one.
    assert out.replace("%s", "").replace("%%", "").count("%") == 0


@pytest.mark.parametrize("sql", ["SELECT 1", "DELETE FROM t WHERE x = 1"])
def test_statements_without_dialect_are_unchanged(sql: str) -> None:
    assert translate(sql).sql == sql
