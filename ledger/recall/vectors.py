"""Recall by meaning: the stored sentence vectors of messages, and the search over them.

The daemon's indexer (broker/recall_indexer.py) reads the messages after its mark
(`pending`), encodes them off the writer and stores the vectors with the new mark in
one short job (`store`); a vector is stored only if its message still holds the text
that was encoded, so a message erased or deleted meanwhile gets none, and the
schema's triggers remove a vector with its message or its erased content. Only user
and assistant messages are embedded.

A search (`nearest`) is the cosine of the query's vector with every vector of the
sessions the caller may reach, the same scope and filters the search by words has
(ledger/recall/answer.py decides the scope), brute force in numpy: exact, its cost
linear in the person's messages (docs/performance.md). Vectors are float32
little-endian unit vectors, so the cosine is the dot product. `fuse` merges the
lists by words and by meaning by reciprocal rank.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ledger.port.records import ROLES, Hit

EMBEDDED_ROLES = ("user", "assistant")
ERASED = "[erased]"
SNIPPET_CHARS = 160
RRF_K = 60  # the usual constant of reciprocal rank fusion: 1 / (k + rank)


# -- the indexer's reads and writes --------------------------------------------


def pending(conn: sqlite3.Connection, limit: int) -> tuple[int, int, list[tuple[int, str, str]]]:
    """(the mark, the last message id of the next `limit` after it, the (id, session,
    content) of those to embed)."""
    row = conn.execute("SELECT through FROM embeddings_done WHERE one = 1").fetchone()
    mark = 0 if row is None else int(row[0])
    rows = conn.execute(
        "SELECT m.id, t.session_label, m.role, m.content FROM messages m"
        " JOIN turns t ON t.id = m.turn_id WHERE m.id > ? ORDER BY m.id LIMIT ?",
        (mark, limit),
    ).fetchall()
    last = int(rows[-1][0]) if rows else mark
    todo = [
        (int(r[0]), str(r[1]), str(r[3]))
        for r in rows
        if r[2] in EMBEDDED_ROLES and str(r[3]).strip() and r[3] != ERASED
    ]
    return mark, last, todo


def store(conn: sqlite3.Connection, through: int, rows: list[tuple[int, str, str, bytes]]) -> int:
    """Writer job: the vectors of (id, session, encoded content, vector) and the mark
    `through`; a message whose content changed or went gets none. The count stored."""
    stored = 0
    for message_id, session, content, vector in rows:
        cur = conn.execute(
            "INSERT INTO embeddings (message_id, session_label, vector)"
            " SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM messages WHERE id = ? AND content = ?)"
            " ON CONFLICT (message_id) DO NOTHING",
            (message_id, session, vector, message_id, content),
        )
        stored += max(cur.rowcount, 0)
    conn.execute(
        "INSERT INTO embeddings_done (one, through) VALUES (1, ?)"
        " ON CONFLICT (one) DO UPDATE SET through = excluded.through",
        (through,),
    )
    return stored


def counts(conn: sqlite3.Connection) -> tuple[int, int]:
    """(vectors stored, the indexer's mark)."""
    (n,) = conn.execute("SELECT count(*) FROM embeddings").fetchone()
    row = conn.execute("SELECT through FROM embeddings_done WHERE one = 1").fetchone()
    return int(n), 0 if row is None else int(row[0])


# -- search ----------------------------------------------------------------------


def nearest(
    conn: sqlite3.Connection,
    query_vector: bytes,
    sessions: Sequence[str] | None,
    limit: int,
    before_ms: int | None = None,
    after_ms: int | None = None,
    roles: Sequence[str] | None = None,
) -> list[Hit]:
    """The `limit` messages of `sessions` (None: all) nearest in meaning to the query's
    vector, best first; the score is the cosine."""
    import numpy as np

    where, args = "", list[Any]()
    if sessions is not None:
        if not sessions:
            return []
        where += f" AND e.session_label IN ({','.join('?' * len(sessions))})"
        args.extend(sessions)
    if before_ms is not None:
        where += " AND m.created_at < ?"
        args.append(before_ms)
    if after_ms is not None:
        where += " AND m.created_at >= ?"
        args.append(after_ms)
    if roles:
        unknown = set(roles) - ROLES
        if unknown:
            raise ValueError(f"unknown role {sorted(unknown)[0]!r}; roles are {sorted(ROLES)}")
        where += f" AND m.role IN ({','.join('?' * len(roles))})"
        args.extend(roles)
    # The messages table only when a filter needs it: the session index alone otherwise.
    joined = " JOIN messages m ON m.id = e.message_id" if "m." in where else ""
    rows = conn.execute(
        "SELECT e.message_id, e.vector FROM embeddings e" + joined + " WHERE 1 = 1" + where,
        args,
    ).fetchall()
    if not rows:
        return []
    query = np.frombuffer(query_vector, dtype="<f4")
    blob = b"".join(r[1] if isinstance(r[1], bytes) else bytes(r[1]) for r in rows)
    matrix = np.frombuffer(blob, dtype="<f4")
    if matrix.size != len(rows) * query.size:
        raise ValueError("the stored vectors are of another model: re-index (docs/turns.md)")
    scores = matrix.reshape(len(rows), query.size) @ query
    if len(scores) > limit:  # the best `limit` first, unordered, then those in order
        best = np.argpartition(-scores, limit)[:limit]
        top = best[np.argsort(-scores[best], kind="stable")]
    else:
        top = np.argsort(-scores, kind="stable")
    ranked = [(int(rows[i][0]), float(scores[i])) for i in top]
    return _hits(conn, ranked)


def _hits(conn: sqlite3.Connection, ranked: list[tuple[int, float]]) -> list[Hit]:
    out = []
    for message_id, score in ranked:
        r = conn.execute(
            "SELECT t.session_label, m.turn_id, m.role, m.created_at, m.content FROM messages m"
            " JOIN turns t ON t.id = m.turn_id WHERE m.id = ?",
            (message_id,),
        ).fetchone()
        if r is not None:
            out.append(
                Hit(
                    message_id,
                    str(r[0]),
                    str(r[1]),
                    str(r[2]),
                    int(r[3]),
                    _snippet(str(r[4])),
                    float(f"{score:.6g}"),
                )
            )
    return out


def _snippet(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= SNIPPET_CHARS else one[: SNIPPET_CHARS - 1] + "…"


def fuse(lists: Sequence[Sequence[Hit]], limit: int) -> list[Hit]:
    """Reciprocal rank fusion: each message scores the sum of 1 / (RRF_K + rank) over
    the lists it is in (rank from 1); the first list's hit (its snippet) is kept."""
    score: dict[int, float] = {}
    first: dict[int, Hit] = {}
    for hits in lists:
        for rank, hit in enumerate(hits, start=1):
            score[hit.message] = score.get(hit.message, 0.0) + 1.0 / (RRF_K + rank)
            first.setdefault(hit.message, hit)
    order = sorted(score, key=lambda m: (-score[m], -m))[:limit]
    return [_rescored(first[m], score[m]) for m in order]


def _rescored(hit: Hit, score: float) -> Hit:
    fields: dict[str, Any] = {f: getattr(hit, f) for f in hit.__dataclass_fields__}
    fields["score"] = float(f"{score:.6g}")
    return Hit(**fields)
