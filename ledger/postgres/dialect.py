"""The ledger's SQL, as written for SQLite, in the spelling PostgreSQL takes.

The jobs and reads of `ledger/` are written once, in SQL both engines accept where a
portable spelling exists. What remains is spelled the SQLite way and translated
here, once per distinct statement (cached), with the same meaning: `?` placeholders
become psycopg's `%s` (a literal `%` doubled, text inside quotes left alone; numbered
ones such as `?1` too, `param_order` saying which argument each takes); `x IS ?`
becomes `IS NOT DISTINCT FROM`; `col ->> '$.key'` on JSON text becomes
`col::jsonb ->> 'key'`; `LIKE`, which ignores the case of ASCII letters in SQLite,
becomes `ILIKE`; `BEGIN IMMEDIATE` becomes `BEGIN` (the writer is the only writer,
as in SQLite). An INSERT into a table whose key the database gives (`ROWID_TABLES`)
asks for it with RETURNING, and the cursor shows it as `lastrowid`. Scalar functions
SQLite has and PostgreSQL lacks (two-argument max/min, instr) are defined by the
PostgreSQL migrations instead.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

ROWID_TABLES = {
    "inbound": "id",
    "queue_items": "seq",
    "messages": "id",
    "session_history": "id",
}

_QUOTED = re.compile(r"('(?:[^']|'')*')")
_IS_PARAM = re.compile(r"\bIS\s+NOT\s+\?|\bIS\s+\?", re.IGNORECASE)
_JSON_KEY = re.compile(r"([\w.]+)\s*->>\s*'\$\.(\w+)'")
_LIKE = re.compile(r"\bLIKE\b", re.IGNORECASE)
_BEGIN = re.compile(r"^\s*BEGIN\s+(IMMEDIATE|DEFERRED|EXCLUSIVE)\b", re.IGNORECASE)
_INSERT = re.compile(r"^\s*INSERT\s+INTO\s+(\w+)", re.IGNORECASE)
_RETURNING = re.compile(r"\bRETURNING\b", re.IGNORECASE)


_NUMBERED = re.compile(r"\?(\d+)")


class Statement(NamedTuple):
    sql: str
    rowid_column: str | None  # the column RETURNING was added for
    param_order: tuple[int, ...] | None  # numbered placeholders: the argument of each


def _outside_quotes(part: str) -> str:
    part = part.replace("%", "%%")
    part = _IS_PARAM.sub(
        lambda m: "IS DISTINCT FROM ?" if "NOT" in m[0].upper() else "IS NOT DISTINCT FROM ?", part
    )
    part = _LIKE.sub("ILIKE", part)
    return part.replace("?", "%s")


@functools.lru_cache(maxsize=4096)
def translate(sql: str) -> Statement:
    pieces = _QUOTED.split(sql)
    order = tuple(
        int(n) - 1 for i, piece in enumerate(pieces) if not i % 2 for n in _NUMBERED.findall(piece)
    )
    if order:
        pieces = [p if i % 2 else _NUMBERED.sub("?", p) for i, p in enumerate(pieces)]
    out = [
        piece.replace("%", "%%") if i % 2 else _outside_quotes(piece)
        for i, piece in enumerate(pieces)
    ]
    text = _JSON_KEY.sub(r"(\1::jsonb ->> '\2')", "".join(out))
    text = _BEGIN.sub("BEGIN", text)
    column = None
    insert = _INSERT.match(text)
    if insert and insert[1].lower() in ROWID_TABLES and not _RETURNING.search(text):
        column = ROWID_TABLES[insert[1].lower()]
        text = f"{text.rstrip().rstrip(';')} RETURNING {column}"
    return Statement(text, column, order or None)
