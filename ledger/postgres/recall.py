"""Full-text recall on PostgreSQL: a GIN index on `messages.words`, the stored
`ledger_tsv(content)` (PG migration 0004), in place of SQLite's FTS5 table.

The shared recall code (ledger/recall/search.py, recall_hint.py) builds the terms and
the filter, and hands the search to the connection's `full_text` (this
module) when it has one.

User text is never tsquery syntax: the terms are FTS5 strings built by `recall.terms`
(quoted words, a trailing `*` for a prefix), made only of letters and digits, and
here become the phrases and prefix flags `ledger_tsquery` turns into a tsquery,
folding each phrase into the words `ledger_tsv` indexes as FTS5 runs its tokenizer:
a phrase is `a <-> b`, a prefix `word:*`, terms joined by `&` (all) or `|` (any).
The arguments are literals in the statement (bound on the client), so the planner
sees the tsquery as a constant. Ranking is `ts_rank` over the newest matching
messages (the newest CANDIDATES, or FILTERED that pass the filter), as SQLite ranks
with bm25: higher is better, ties to the newer message; match, ranking and a
phrase's recheck read the stored `words` (docs/performance.md). Snippets are made by
SQLite's FTS5 `snippet()` over the found texts (postgres/snippets.py), so they are
the SQLite port's, folds marked.
"""

from __future__ import annotations

import re
from typing import Any

from ledger.forgotten import NOT_THEIRS
from ledger.port.records import Hit
from ledger.postgres.snippets import Snippets
from ledger.recall import search as recall

VECTOR = "m.words"  # the stored ledger_tsv(content) the GIN index holds
# NULL when no phrase has a word: it matches nothing. The casts: an empty list is
# untyped, and the connection passes a bool as an int, as sqlite3 does.
QUERY = "ledger_tsquery(?::text[], ?::boolean[], ?::boolean)"
_WORD = re.compile(r"[^\W_]+")


def tsquery(fts_terms: list[str], match: recall.Match) -> tuple[list[str], list[bool], bool]:
    """The arguments of QUERY for `recall.terms`' strings."""
    phrases = [" ".join(_WORD.findall(term)) for term in fts_terms]
    return phrases, [term.endswith("*") for term in fts_terms], match == "any"


def search(
    conn: Any,
    fts_terms: list[str],
    match: recall.Match,
    flt: Any,
    limit: int,
    snippets: Snippets,
) -> list[Hit]:
    """The best `limit` messages, best first."""
    q = tsquery(fts_terms, match)
    k = max(recall.FILTERED, limit) if flt.where else max(recall.CANDIDATES, limit)
    rows = conn.execute(
        "SELECT c.id, c.session_label, c.turn_id, c.role, c.created_at, c.content,"
        f" ts_rank(c.words, {QUERY}) AS score"
        " FROM (SELECT m.id, t.session_label, m.turn_id, m.role, m.created_at, m.content,"
        " m.words"
        " FROM messages m JOIN turns t ON t.id = m.turn_id"
        f" WHERE {VECTOR} @@ {QUERY} AND {NOT_THEIRS}"
        + flt.where
        + " ORDER BY m.id DESC LIMIT ?) c"
        " ORDER BY score DESC, c.id DESC LIMIT ?",
        (*q, *q, *flt.args, k, limit),
    ).fetchall()
    texts = snippets.of([str(r[5]) for r in rows], recall.joined(fts_terms, match))
    return [
        Hit(int(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4]), text, float(f"{r[6]:.6g}"))
        for r, text in zip(rows, texts, strict=True)
    ]


def holds_term(conn: Any, session: str, fts: str, own_msg_ids: tuple[str, ...], probe: int) -> bool:
    """Whether one of the newest `probe` messages holding `fts` is an earlier one of
    `session` (recall_hint.py)."""
    q = tsquery([fts], "all")
    own = list(own_msg_ids) or [""]
    marks = ",".join("?" * len(own))
    row = conn.execute(
        "SELECT 1 FROM (SELECT m.id, m.turn_id, m.msg_id FROM messages m"
        f" WHERE {VECTOR} @@ {QUERY} AND {NOT_THEIRS}"
        " ORDER BY m.id DESC LIMIT ?) f"
        " JOIN turns t ON t.id = f.turn_id WHERE t.session_label = ?"
        f" AND coalesce(f.msg_id, '') NOT IN ({marks}) LIMIT 1",
        (*q, probe, session, *own),
    ).fetchone()
    return row is not None


class FullText:
    """What the shared recall code calls on a connection's `full_text`: one a
    connection, since it keeps that connection's snippet table (snippets.py)."""

    def __init__(self) -> None:
        self.snippets = Snippets()

    def search(
        self, conn: Any, fts_terms: list[str], match: recall.Match, flt: Any, limit: int
    ) -> list[Hit]:
        return search(conn, fts_terms, match, flt, limit, self.snippets)

    holds_term = staticmethod(holds_term)
