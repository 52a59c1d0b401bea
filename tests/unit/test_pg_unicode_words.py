"""PostgreSQL's `ledger_tsv` (PG migration 0004) against SQLite's unicode61 tokenizer,
the words FTS5 finds on the SQLite ledger: every code point, in a C-locale database
and in one whose locale knows Unicode, and the rebuilt index of a ledger written
under migration 0003."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.postgres import schema
from ledger.postgres.recall import QUERY, tsquery
from ledger.recall import search as recall
from tests.unicode61 import CODE_POINTS, Tokenizer, sqlite_tokenizer

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def cluster(pg_template: tuple[Any, str]) -> Any:
    """The test session's cluster: these tests make databases of their own on it."""
    return pg_template[0]


@pytest.fixture(scope="module")
def sqlite_words() -> Tokenizer:
    return sqlite_tokenizer()


def _database(cluster: Any, name: str, locale: str) -> Any:
    import psycopg

    from ledger.postgres.connection import PgConnection

    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(
            f"CREATE DATABASE \"{name}\" TEMPLATE template0 LC_COLLATE '{locale}'"
            f" LC_CTYPE '{locale}'"
        )
    return PgConnection(cluster.dsn(name), reader=False)


def _words(tsv: str) -> list[str]:
    """The words of a tsvector's text, in the order of their positions."""
    at: list[tuple[int, str]] = []
    for entry in tsv.split(" ") if tsv else []:
        lexeme, positions = entry.rsplit(":", 1)
        at += [(int(p), lexeme.strip("'")) for p in positions.split(",")]
    return [w for _, w in sorted(at)]


# About a minute a locale: 1.1 million calls of ledger_tsv, and SQLite's probe.
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("locale", ["C", "C.utf8"])
def test_every_code_point_splits_and_folds_as_sqlite_does(
    cluster: Any, sqlite_words: Tokenizer, locale: str
) -> None:
    conn = _database(cluster, f"words_{locale.replace('.', '_')}", locale)
    try:
        schema.migrate(conn)
        rows = conn.execute(
            "SELECT cp, ledger_tsv('a' || chr(cp) || 'b')::text FROM generate_series(1, 1114111)"
            " AS cp WHERE cp NOT BETWEEN 55296 AND 57343 ORDER BY cp"
        ).fetchall()
    finally:
        conn.close()
    assert [r[0] for r in rows] == CODE_POINTS
    wrong = [
        (hex(cp), got, want)
        for cp, tsv in rows
        if (got := _words(tsv)) != (want := sqlite_words.tokens(f"a{chr(cp)}b"))
    ]
    assert wrong == []


def test_ascii_text_splits_as_sqlite_does(cluster: Any) -> None:
    """ASCII text takes PostgreSQL's own parser (PG migration 0004): random text with
    the shapes its parser names (numbers, versions, hosts, paths, mail, tags) and
    words of 2048 letters, against SQLite's tokens."""
    import random
    import sqlite3

    rng = random.Random(4)
    pieces = [
        "Heron", "x", "1e5", "1.5e-3", "0x1F", "v1.2.3", "-12", "a-b", "co-op", "foo.bar.com",
        "/usr/lib", "a@b.org", "<b>", "&amp;", "http://x.y/z?q=1", "12abc34", "_", "'", "\\",
        " ", "\t", "\x01", "\x7f", "ABC_def", "e" * 2048, "ÿ"[:0], "CamelCase", "--", "...",
    ]  # fmt: skip
    texts = ["".join(rng.choices(pieces, k=rng.randint(1, 12))) for _ in range(500)]
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE f USING fts5(x, tokenize = 'unicode61')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance')")
    db.executemany("INSERT INTO f (rowid, x) VALUES (?, ?)", enumerate(texts))
    conn = _database(cluster, "ascii", "C.utf8")
    try:
        schema.migrate(conn)
        for n, text in enumerate(texts):
            want = [
                r[0] for r in db.execute("SELECT term FROM v WHERE doc = ? ORDER BY offset", (n,))
            ]
            (tsv,) = conn.execute("SELECT ledger_tsv(?)::text", (text,)).fetchone()
            assert _words(tsv) == [w for w in want if len(w) < 2048], text
    finally:
        conn.close()


def test_the_python_model_of_the_tokenizer_is_sqlites(sqlite_words: Tokenizer) -> None:
    """`Tokenizer.tokens`, which the test above expects, against SQLite on whole texts."""
    import sqlite3

    texts = [
        "Héron wades; naïve—café ÉTÉ été",
        "a \u0301 b cafe\u0301 x²y 'quote' back\\slash",
        "Ωμέγα Москва 東京タワー \U00010400X ǅ İ ß ﬁ",
    ]
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(x, tokenize = 'unicode61')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance')")
    conn.executemany("INSERT INTO f (rowid, x) VALUES (?, ?)", enumerate(texts))
    for n, text in enumerate(texts):
        got = [r[0] for r in conn.execute("SELECT term FROM v WHERE doc = ? ORDER BY offset", (n,))]
        assert sqlite_words.tokens(text) == got


def test_rows_written_under_migration_0003_are_found_by_their_new_words(cluster: Any) -> None:
    """Rows written before 0004 get their new words, and so do those another session
    writes after it, one that had written under 0003 (the header's comment)."""
    from ledger.postgres.connection import PgConnection

    conn = _database(cluster, "upgraded", "C")
    other = PgConnection(cluster.dsn("upgraded"), reader=False)
    insert = (
        "INSERT INTO messages (turn_id, seq, role, content, created_at)"
        " VALUES ('t', ?, 'user', ?, 0)"
    )
    try:
        schema.migrate(conn, through=3)
        for session in (conn, other):
            session.execute("SET session_replication_role = replica")  # rows without their turn
        texts = ["Le Héron wades", "naïve—café", "ÉTÉ Москва", "plain ascii words"]
        for n, text in enumerate(texts, 1):
            (other if n == 1 else conn).execute(insert, (n, text))
        schema.migrate(conn)
        other.execute(insert, (5, "Héron again"))
        conn.execute("SET enable_seqscan = off")  # the index answers, not a scan
        found = {
            query: [
                r[0]
                for r in conn.execute(
                    f"SELECT content FROM messages WHERE words @@ {QUERY} ORDER BY id",
                    tsquery(recall.terms(query), "all"),
                )
            ]
            for query in ("heron", "été", "москва", "cafe", "naive cafe", "ascii")
        }
        plan = " ".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN SELECT 1 FROM messages"
                " WHERE words @@ ledger_tsquery('{heron}', '{f}', false)"
            )
        )
    finally:
        other.close()
        conn.close()
    assert "messages_fts" in plan
    assert found == {
        "heron": ["Le Héron wades", "Héron again"],
        "été": ["ÉTÉ Москва"],
        "москва": ["ÉTÉ Москва"],
        "cafe": ["naïve—café"],
        "naive cafe": ["naïve—café"],
        "ascii": ["plain ascii words"],
    }
