"""The recall hint's one read (core/recall_hint.py decides what to ask): which
of a few terms the session's archived messages hold.

One indexed probe a term: the newest PROBE messages that match it anywhere, joined to
their turns' session. A term so common that none of its newest PROBE matches is this
session's counts as absent: it names nothing particular enough to recall, and the
bound keeps the check cheap (docs/performance.md). Messages of the turn's own inputs
(by msg_id: an aborted turn's inputs run again) do not count: they are the message,
not an older turn.
"""

from __future__ import annotations

import json
import sqlite3

from ledger.forgotten import NOT_THEIRS
from ledger.recall import search as recall

PROBE = 200


def found_terms(
    conn: sqlite3.Connection, session: str, terms: tuple[str, ...], own_msg_ids: tuple[str, ...]
) -> list[str]:
    """The terms, in order, that some earlier message of `session` holds."""
    own = json.dumps(list(own_msg_ids))
    out = []
    for term in terms:
        try:
            fts = " ".join(recall.terms(f'"{term}"'))  # the whole term, as one phrase
        except ValueError:
            continue
        engine = getattr(conn, "full_text", None)  # another engine's own search: ledger/postgres
        if engine is not None:
            if engine.holds_term(conn, session, fts, own_msg_ids, PROBE):
                out.append(term)
            continue
        row = conn.execute(
            "SELECT 1 FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?"
            " ORDER BY rowid DESC LIMIT ?) f JOIN messages m ON m.id = f.rowid"
            " JOIN turns t ON t.id = m.turn_id WHERE t.session_label = ?"
            f" AND {NOT_THEIRS}"
            " AND coalesce(m.msg_id, '') NOT IN (SELECT value FROM json_each(?)) LIMIT 1",
            (fts, PROBE, session, own),
        ).fetchone()
        if row is not None:
            out.append(term)
    return out
