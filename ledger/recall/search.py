"""Conversation recall: full-text search over the verbatim history. The other
reads of the recall tool (a run of turns, tool calls, a session's summary) are
`ledger/recall/reads.py`.

Sync functions over a sqlite3 connection (the ledger runs them on a reader); they
only read. Times are integer milliseconds (UTC), as stored.

User text never reaches FTS5 as syntax: `terms` turns it into quoted strings only
(each word, or "a phrase" in double quotes, with a trailing `*` for a prefix;
operators such as AND, NEAR, `:`, `(`, `^` are plain words), and text with nothing to
search raises ValueError, so a MATCH never fails with an FTS5 syntax error. All terms
must match (`match="any"`: one is enough); bare stopwords are left out when other
terms remain ("what did we decide about auth" is `decide auth`).

A session's history is every turn with its label, on every thread (after `/new`,
after a lost head race), aborted turns included: nothing is hidden; a search may
cover several sessions at once (one person's: ledger/recall/scope.py). Ranking is
FTS5's bm25 over the newest matching messages (the newest CANDIDATES of all, or the
newest FILTERED that pass a filter: a session, times, roles), so a very common word
costs little more than a rare one and among very common matches recent history wins;
scores are -bm25, higher is better. The schema indexes message text only: a session
filter is applied to the matches, or the matches to a small session's message ids
(`_rank`).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ledger.forgotten import NOT_THEIRS
from ledger.port import cipher as driver
from ledger.port.records import ROLES, Hit
from ledger.recall.reads import require_session

MARK = ("**", "**")  # around matched words in snippets
SNIPPET_TOKENS = 16
CANDIDATES = 2000  # newest matches ranked, unfiltered (at least the limit)
FILTERED = 50  # newest matches ranked, filtered: a session, times, roles (at least the limit)
PROBE = 200  # newest matches put through the filter first: enough for a rare word
MAX_TERMS = 32
MIN_PREFIX = 3  # shorter prefixes expand to much of the vocabulary (no prefix index)
# A literal of 60 words reads worse than a string split.
STOPWORDS = frozenset(
    """
    a about also am an and are as at be been but by can could did do does for from had has have
    how i if in into is it its just me my of on or our so than that the their them then there
    these they this to was we were what when where which who why will with would you your
    """.split()  # noqa: SIM905
)
Match = Literal["all", "any"]

_TERM = re.compile(r'"([^"]*)"\s*(\*?)|(\S+)')
_WORD = re.compile(r"[^\W_]+")  # what the unicode61 tokenizer keeps, near enough


# -- the query language ------------------------------------------------------


def joined(fts_terms: list[str], match: Match) -> str:
    """The FTS5 query of `terms`' strings: all of them, or any."""
    return (" OR " if match == "any" else " ").join(fts_terms)


def terms(text: str) -> list[str]:
    """The FTS5 strings of the terms of `text`, stopwords left out."""
    found: list[tuple[str, bool]] = []  # (FTS5 string, a stopword that may go)
    for m in _TERM.finditer(text):
        quoted = m[1] is not None
        body, prefix = (m[1], m[2]) if quoted else _bare(m[3])
        words = _WORD.findall(body)
        if not words:
            continue
        if prefix and len(words[-1]) < MIN_PREFIX:
            raise ValueError(f"a prefix search needs at least {MIN_PREFIX} letters before '*'")
        stop = not (quoted or prefix) and len(words) == 1 and words[0].lower() in STOPWORDS
        found.append(('"' + " ".join(words) + '"' + ("*" if prefix else ""), stop))
    if not found:
        raise ValueError("the query has no words to search for")
    if len(found) > MAX_TERMS:
        raise ValueError(f"the query has more than {MAX_TERMS} terms")
    return [t for t, stop in found if not stop] or [t for t, _ in found]


def _bare(word: str) -> tuple[str, str]:
    stripped = word.rstrip("*")
    return stripped, "*" if stripped != word else ""


# -- search ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Filter:
    sessions: tuple[str, ...] | None
    where: str  # conditions on m (messages) and t (turns), each starting with " AND"
    args: tuple[Any, ...]


def search(
    conn: sqlite3.Connection,
    query: str,
    session: str | Sequence[str] | None,
    limit: int,
    before_ms: int | None = None,
    after_ms: int | None = None,
    roles: Sequence[str] | None = None,
    *,
    match: Match = "all",
) -> list[Hit]:
    """The best `limit` messages for `query`, best first; `session` None: all sessions,
    a list: those sessions."""
    fts_terms = terms(query)
    fts = joined(fts_terms, match)
    sessions = (
        (session,) if isinstance(session, str) else None if session is None else tuple(session)
    )
    flt = _filter(sessions, before_ms, after_ms, roles)
    if sessions:
        require_session(conn, sessions[0])
    engine = getattr(conn, "full_text", None)  # another engine's own search: ledger/postgres
    if engine is not None:
        return engine.search(conn, fts_terms, match, flt, limit)  # type: ignore[no-any-return]
    try:
        ranked = _rank(conn, fts, flt, limit)[:limit]
        return _hits(conn, fts, ranked)
    except driver.OperationalError as exc:  # `terms` rules it out; keep the promise anyway
        if "fts5" not in str(exc):
            raise
        raise ValueError(f"the query could not be searched: {exc}") from exc


def _filter(
    sessions: tuple[str, ...] | None,
    before_ms: int | None,
    after_ms: int | None,
    roles: Sequence[str] | None,
) -> _Filter:
    where = ""
    args: list[Any] = []
    if sessions:
        where += f" AND t.session_label IN ({','.join('?' * len(sessions))})"
        args.extend(sessions)
    for cond, value in (
        (" AND m.created_at < ?", before_ms),
        (" AND m.created_at >= ?", after_ms),
    ):
        if value is not None:
            where += cond
            args.append(value)
    if roles:
        unknown = set(roles) - ROLES
        if unknown:
            raise ValueError(f"unknown role {sorted(unknown)[0]!r}; roles are {sorted(ROLES)}")
        where += f" AND m.role IN ({','.join('?' * len(roles))})"
        args.extend(roles)
    return _Filter(sessions, where, tuple(args))


def _rank(conn: sqlite3.Connection, fts: str, flt: _Filter, limit: int) -> list[tuple[int, float]]:
    """(rowid, -bm25) of the candidates, best first."""
    if not flt.where:
        rows = conn.execute(
            "SELECT rowid, rank FROM messages_fts WHERE messages_fts MATCH ?"
            " ORDER BY rowid DESC LIMIT ?",
            (fts, max(CANDIDATES, limit)),
        ).fetchall()
    else:
        k = max(FILTERED, limit)
        ids = _probe(conn, fts, flt)
        if ids is not None:
            rows = _rank_among(conn, fts, ids, k)
        elif _small(conn, flt, k):
            rows = _rank_among(conn, fts, _filtered_ids(conn, flt), k)
        else:
            rows = _scan(conn, fts, flt, k)
    return sorted(((int(r[0]), -float(r[1])) for r in rows), key=lambda r: (-r[1], -r[0]))


def _probe(conn: sqlite3.Connection, fts: str, flt: _Filter) -> list[int] | None:
    """The filter over the newest PROBE matches: all candidates when there are no more
    (a rare word), else None."""
    rows = conn.execute(
        "SELECT f.rowid, 1 = 1" + flt.where + " FROM (SELECT rowid FROM messages_fts"
        " WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?) f"
        " JOIN messages m ON m.id = f.rowid JOIN turns t ON t.id = m.turn_id",
        (*flt.args, fts, PROBE),
    ).fetchall()
    return [int(r[0]) for r in rows if r[1]] if len(rows) < PROBE else None


def _small(conn: sqlite3.Connection, flt: _Filter, k: int) -> bool:
    """Whether listing the session's M messages beats walking the matches through the
    join until k of them are the session's (about k * N / M matches of a common word
    when the session has M of N messages): listing wins when M * M < 1.4 * k * N, by
    their costs per row (docs/performance.md)."""
    if not flt.sessions:
        return False
    marks = ",".join("?" * len(flt.sessions))
    (turns,) = conn.execute(
        f"SELECT coalesce(sum(turns), 0) FROM sessions WHERE label IN ({marks})", flt.sessions
    ).fetchone()
    total = conn.execute("SELECT max(id) FROM messages").fetchone()[0] or 0
    msgs = 2 * int(turns)
    return msgs * msgs < 1.4 * k * total


def _filtered_ids(conn: sqlite3.Connection, flt: _Filter) -> list[int]:
    return [
        int(r[0])
        for r in conn.execute(
            "SELECT m.id FROM turns t JOIN messages m ON m.turn_id = t.id WHERE 1 = 1" + flt.where,
            flt.args,
        )
    ]


def _scan(conn: sqlite3.Connection, fts: str, flt: _Filter, k: int) -> list[tuple[int, float]]:
    """Walk the matches newest first through the filter until k pass; rank those."""
    rows = conn.execute(
        "SELECT f.rowid, f.rank FROM messages_fts f CROSS JOIN messages m ON m.id = f.rowid"
        " CROSS JOIN turns t ON t.id = m.turn_id WHERE messages_fts MATCH ?"
        + flt.where
        + " ORDER BY f.rowid DESC LIMIT ?",
        (fts, *flt.args, k),
    ).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


def _rank_among(
    conn: sqlite3.Connection, fts: str, ids: list[int], k: int
) -> list[tuple[int, float]]:
    """bm25 of the newest k matches among `ids`, in one statement.

    The id set is a filter evaluated on the doclist walk (`+rowid`): offered to
    FTS5 as a rowid constraint it would run the whole query once per id, bm25's
    document frequencies included. The rowid bounds are a seek FTS5 does do.
    """
    if not ids:
        return []
    rows = conn.execute(
        "SELECT rowid, rank FROM messages_fts WHERE messages_fts MATCH ?"
        " AND rowid BETWEEN ? AND ? AND +rowid IN (SELECT value FROM json_each(?))"
        " ORDER BY rowid DESC LIMIT ?",
        (fts, min(ids), max(ids), json.dumps(ids), k),
    ).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


_HIT = (
    "SELECT f.rowid, t.session_label, m.turn_id, m.role, m.created_at,"
    " snippet(messages_fts, 0, ?, ?, '…', ?) FROM messages_fts f"
    " CROSS JOIN messages m ON m.id = f.rowid CROSS JOIN turns t ON t.id = m.turn_id"
    f" WHERE messages_fts MATCH ? AND {NOT_THEIRS}"
)


def _hits(conn: sqlite3.Connection, fts: str, ranked: list[tuple[int, float]]) -> list[Hit]:
    """Rows and snippets for the winners: a seek each, or for prefix queries (which
    FTS5 expands again on every seek) one walk over the span of the winners."""
    if not ranked:
        return []
    ids = [r[0] for r in ranked]
    head = (*MARK, SNIPPET_TOKENS, fts)
    if "*" in fts:
        rows = conn.execute(
            _HIT + " AND f.rowid BETWEEN ? AND ? AND +f.rowid IN (SELECT value FROM json_each(?))",
            (*head, min(ids), max(ids), json.dumps(ids)),
        ).fetchall()
    else:
        rows = [conn.execute(_HIT + " AND f.rowid = ?", (*head, i)).fetchone() for i in ids]
    found = {int(r[0]): r for r in rows if r is not None}
    return [
        Hit(i, str(r[1]), str(r[2]), str(r[3]), int(r[4]), str(r[5]), float(f"{score:.6g}"))
        for i, score in ranked
        if (r := found.get(i)) is not None
    ]
