"""Recall's snippets on PostgreSQL, made by SQLite's own FTS5 `snippet()`.

A snippet marks the words the search matched, as the SQLite port's does
(ledger/recall/search.py). PostgreSQL's `ts_headline` cannot: it reads the text with
its own parser, not with `ledger_tsv`, so a word found only through a fold ("Héron"
for "heron") stayed unmarked. So the found texts go through the very function the
SQLite port uses, `snippet()` over an FTS5 table tokenized `unicode61`, with the same
query and arguments: the two ports' snippets are the same text
(tests/conformance/test_port_differential.py compares them).

The FTS5 table is in an in-memory database of the connection's own, made on its first
search and kept (making it costs more than a search's snippets: docs/performance.md);
each search writes its texts in a transaction it rolls back, so the table is empty
between searches whatever happened. A text FTS5 does not match gets its first words
unmarked, never an error.
"""

from __future__ import annotations

import sqlite3

from ledger.recall import search as recall

_SNIPPET = "SELECT rowid, snippet(found, 0, ?, ?, '…', ?) FROM found WHERE found MATCH ?"


class Snippets:
    def __init__(self) -> None:
        self._db: sqlite3.Connection | None = None

    def of(self, texts: list[str], fts: str) -> list[str]:
        """The snippet of each text for the FTS5 query `fts`."""
        if not texts:
            return []
        db = self._open()
        db.execute("BEGIN")
        try:
            db.executemany("INSERT INTO found (rowid, content) VALUES (?, ?)", enumerate(texts))
            made = dict(db.execute(_SNIPPET, (*recall.MARK, recall.SNIPPET_TOKENS, fts)))
        finally:
            db.execute("ROLLBACK")  # the table is empty between searches
        return [made.get(i) or _first_words(text) for i, text in enumerate(texts)]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            # Not bound to a thread: its PgConnection is, one at a time, whichever reader's.
            db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            db.execute("CREATE VIRTUAL TABLE found USING fts5(content, tokenize = 'unicode61')")
            self._db = db
        return self._db


def _first_words(text: str) -> str:
    """A text FTS5 does not match: its first words, unmarked."""
    words = text.split()
    cut = " ".join(words[: recall.SNIPPET_TOKENS])
    return cut + "…" if len(words) > recall.SNIPPET_TOKENS else cut
