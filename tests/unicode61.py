"""SQLite's unicode61 tokenizer, with the options of the ledger's FTS5 table
(ledger/migrations/0003_memory.sql: the defaults), code point by code point.

It is the oracle PostgreSQL's `ledger_tsv` is checked against
(tests/unit/test_pg_unicode_words.py), and it wrote the tables of PostgreSQL
migration 0004 (`python -m tests.unicode61` prints them).

unicode61 decides each code point alone: a separator, or a token character that
folds to one code point or to none (a diacritic it drops). Nothing depends on the
neighbours, so one probe a code point ("a", the code point, "b") tells all: two
tokens "a" and "b" for a separator, else one token "a<fold>b". The probes go in a
few large documents, read back in order through `fts5vocab` (one row per token
instance), as one document a probe takes ten times as long.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from dataclasses import dataclass

SURROGATES = range(0xD800, 0xE000)  # not characters: UTF-8 cannot carry them
CODE_POINTS = [cp for cp in range(1, 0x110000) if cp not in SURROGATES]  # NUL ends a C string
_PROBES_A_DOCUMENT = 50_000


@dataclass(frozen=True)
class Tokenizer:
    separators: frozenset[int]
    folds: dict[int, str]  # token characters that change: to one character, or to ""

    def tokens(self, text: str) -> list[str]:
        """`text` as unicode61 tokenizes it."""
        out: list[str] = []
        word: list[str] | None = None
        for ch in text:
            if ord(ch) in self.separators:
                if word:
                    out.append("".join(word))
                word = None
                continue
            word = word if word is not None else []
            word.append(self.folds.get(ord(ch), ch))
        if word:
            out.append("".join(word))
        return [w for w in out if w]


def sqlite_tokenizer() -> Tokenizer:
    """Every code point through SQLite's own tokenizer."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(x, tokenize = 'unicode61')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance')")
    chunks = [
        CODE_POINTS[i : i + _PROBES_A_DOCUMENT]
        for i in range(0, len(CODE_POINTS), _PROBES_A_DOCUMENT)
    ]
    with conn:
        conn.executemany(
            "INSERT INTO f (rowid, x) VALUES (?, ?)",
            ((n, " ".join(f"a{chr(cp)}b" for cp in chunk)) for n, chunk in enumerate(chunks)),
        )
    separators: set[int] = set()
    folds: dict[int, str] = {}
    for n, chunk in enumerate(chunks):
        terms = [
            r[0] for r in conn.execute("SELECT term FROM v WHERE doc = ? ORDER BY offset", (n,))
        ]
        at = 0
        for cp in chunk:
            if terms[at] == "a":
                assert terms[at + 1] == "b", (hex(cp), terms[at : at + 2])
                separators.add(cp)
                at += 2
                continue
            term = terms[at]
            assert term[0] == "a" and term[-1] == "b" and len(term) <= 3, (hex(cp), term)
            if term[1:-1] != chr(cp):
                folds[cp] = term[1:-1]
            at += 1
        assert at == len(terms)
    conn.close()
    return Tokenizer(frozenset(separators), folds)


# -- the tables of PostgreSQL migration 0004 ---------------------------------


def _ranges(cps: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for cp in sorted(cps):
        if out and out[-1][1] == cp - 1:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


def _escape(cp: int) -> str:
    """A code point as PostgreSQL's regular expressions spell it."""
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def _json(text: str) -> str:
    """`text` as a JSON string, ASCII only (code points past U+FFFF as surrogate pairs)."""
    return json.dumps(text, ensure_ascii=True)


def _class(cps: list[int]) -> list[str]:
    """The ranges of a regular expression's bracket expression of `cps`."""
    return [_escape(a) if a == b else f"{_escape(a)}-{_escape(b)}" for a, b in _ranges(cps)]


def _lines(items: list[str], width: int = 84) -> list[str]:
    lines, line = [], ""
    for item in items:
        if line and len(line) + len(item) > width:
            lines.append(line)
            line = ""
        line += item
    return [*lines, line]


def sql_tables(tok: Tokenizer) -> dict[str, str]:
    """The tables of ledger_tsv as SQL constants, each over lines joined by `||`:
    the separators and the dropped marks (bracket expressions: ASCII text, so
    nothing in the file is invisible) and the folds of non-ASCII characters (a
    JSON object; ASCII letters are lower()'s)."""
    assert all(tok.folds[cp] == chr(cp).lower() for cp in tok.folds if cp < 0x80)
    dropped = sorted(cp for cp, to in tok.folds.items() if not to)
    folds = sorted(cp for cp, to in tok.folds.items() if to and cp >= 0x80)
    pairs = [f"{_json(chr(cp))}:{_json(tok.folds[cp])}," for cp in folds]
    pairs[-1] = pairs[-1].rstrip(",")
    return {
        "separators": " ||\n".join(
            f"'{line}'" for line in ["[", *_lines(_class(sorted(tok.separators))), "]+"]
        ),
        "dropped": f"'[{''.join(_class(dropped))}]'",
        "folds": " ||\n".join(f"'{line}'" for line in ["{", *_lines(pairs), "}"]),
    }


if __name__ == "__main__":
    tokenizer = sqlite_tokenizer()
    sys.stdout.write(f"-- SQLite {sqlite3.sqlite_version}\n")
    for name, sql in sql_tables(tokenizer).items():
        sys.stdout.write(f"-- {name}\n{sql}\n")
