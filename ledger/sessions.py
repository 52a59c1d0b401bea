"""Session-level writes that are not turns: forks, exports and imports.

A fork is one new row (and a history row): constant time whatever the length of the
thread, as the fork shares every ancestor turn. An import creates a new session with
new turn ids, so an export can be imported any number of times, into any ledger, and
it reads back the same items: a turn the daemon aborted is exported whole and its
`status` imported back, so the copy hides its inputs as the original does.

An export carries the thread's file snapshots (ledger/snapshots.py): each turn line
its snapshot rows and events, and before it a `blob` line for each content it names
that no earlier line carried, so every blob travels once; an import checks each blob
against its hash and restores `file.at` exactly, and a snapshot naming a blob not
given fails it. A turn line's `type` is its turn's own (`turn`, `compaction`, ...),
so an import takes every line with a `messages` list for a turn line; only a blob
line is told by its type. A compaction turn's line carries its `compactions` row,
the turns it names given as positions of turn lines in the export, which an import
maps to the new turns; a line without it (an older export) imports as before, and an
older broker ignores it alike.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from ledger import audit, snapshots
from ledger.live_events import take_session_seqs
from ledger.port import cipher as driver
from ledger.port.errors import Conflict, NotFound
from ledger.recent import block_of
from plumbing.ids import new_id

EXPORT_FORMAT = "agent-broker-session"
EXPORT_VERSION = 2  # 2: blob lines, and turn lines with files and events
READS_VERSIONS = (1, 2)


_BAD_TURN: tuple[type[Exception], ...] = (KeyError, TypeError, *driver.IntegrityError)


def label_free(conn: sqlite3.Connection, label: str) -> bool:
    return (
        conn.execute("SELECT 1 FROM sessions WHERE label = ?", (label,)).fetchone() is None
        and conn.execute("SELECT 1 FROM session_aliases WHERE alias = ?", (label,)).fetchone()
        is None
    )


def fork(conn: sqlite3.Connection, turn_id: str, label: str | None, now: int) -> str:
    row = conn.execute(
        "SELECT t.session_label, s.persona FROM turns t JOIN sessions s"
        " ON s.label = t.session_label WHERE t.id = ? AND s.status != 'erased'",
        (turn_id,),
    ).fetchone()
    if row is None:  # an erased person's turn is gone from its mark on (ledger/forgotten.py)
        raise NotFound(f"no turn {turn_id!r}", field="turn")
    label = label or f"fork:{new_id()}"
    if not label_free(conn, label):
        raise Conflict(f"the label {label!r} is taken", field="label")
    conn.execute(
        "INSERT INTO sessions (label, kind, head_turn_id, persona, origin, status,"
        " parent_session, parent_turn_id, created_at, updated_at, updated_block)"
        " VALUES (?, 'fork', ?, ?, 'fork', 'active', ?, ?, ?, ?, ?)",
        (label, turn_id, row[1], row[0], turn_id, now, now, block_of(now)),
    )
    conn.execute(
        "INSERT INTO session_history (session_label, turn_id, prev_turn_id, reason, changed_at)"
        " VALUES (?, ?, NULL, 'fork', ?)",
        (label, turn_id, now),
    )
    return label


def export_lines(
    conn: sqlite3.Connection, label: str, now: int, *, with_audit: bool = False
) -> Iterator[dict[str, Any]]:
    """A header, then each turn of the session's thread from its root, with messages;
    `with_audit` (the operator's export): then the audit rows of the session and its
    turns, one `audit` line each (ledger/audit.py)."""
    row = conn.execute(
        "SELECT head_turn_id, persona, kind, origin FROM sessions WHERE label = ?", (label,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no session {label!r}", field="session")
    chain = thread_ids(conn, row[0])
    yield {
        "type": "header",
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "label": label,
        "persona": row[1],
        "kind": row[2],
        "origin": row[3],
        "exported_at": now,
        "turns": len(chain),
    }
    sent: set[str] = set()
    positions = {turn_id: n for n, turn_id in enumerate(chain)}
    for turn_id in chain:
        line = _turn_line(conn, turn_id, positions)
        for f in line["files"]:
            if f["stored"] and f["sha256"] not in sent:
                sent.add(f["sha256"])
                yield snapshots.blob_line(conn, f["sha256"])
        yield line
    if with_audit:
        for row in audit.rows_about(conn, [label, *chain]):
            yield {"type": "audit", **row}


def export_snapshot(conn: sqlite3.Connection, label: str, now: int) -> list[dict[str, Any]]:
    """`export_lines` read in one snapshot: a thread that grows meanwhile is exported as
    it was when the export began."""
    conn.execute("BEGIN")
    try:
        return list(export_lines(conn, label, now))
    finally:
        conn.execute("COMMIT")


def thread_ids(conn: sqlite3.Connection, head: str | None) -> list[str]:
    if head is None:
        return []
    rows = conn.execute(
        "WITH RECURSIVE chain(id, depth) AS (SELECT ?, 0 UNION ALL"
        " SELECT t.parent_id, c.depth + 1 FROM turns t JOIN chain c ON t.id = c.id"
        " WHERE t.parent_id IS NOT NULL) SELECT id FROM chain ORDER BY depth DESC",
        (head,),
    ).fetchall()
    return [str(r[0]) for r in rows]


TURN_COLUMNS = (
    "id",
    "type",
    "status",
    "reason",
    "error",
    "output",
    "engine",
    "model",
    "started_at",
    "completed_at",
    "prompt_tokens",
    "completion_tokens",
    "title",  # these and the rest: absent from older exports, and then NULL
    "title_source",
    "outcome",
    "summary",  # JSON objects in the line, JSON text in the row
    "metadata",
)
OPTIONAL_TURN_COLUMNS = frozenset(TURN_COLUMNS[TURN_COLUMNS.index("title") :])
JSON_TURN_COLUMNS = ("summary", "metadata")
MESSAGE_COLUMNS = ("role", "channel", "msg_id", "sender_id", "content", "tokens", "created_at")
TOOL_COLUMNS = ("name", "arguments", "result", "status", "created_at")


COMPACTION_COLUMNS = (
    "summary",
    "turns_summarized",
    "trigger",
    "created_at",  # these four are required in a line's `compaction`, the rest optional
    "instructions",
    "model",
    "fallback",
    "tokens_before",
    "tokens_after",
    "summary_tokens",
    "summarization_input_tokens",
    "summarization_output_tokens",
    "duration_ms",
)
_COMPACTION_TURNS = ("summarized_through_turn_id", "first_kept_turn_id")


def _compaction(
    conn: sqlite3.Connection, turn_id: str, positions: dict[str, int]
) -> dict[str, Any] | None:
    """The `compactions` row of a turn as its line carries it, or None."""
    row = conn.execute(
        f"SELECT {', '.join(COMPACTION_COLUMNS + _COMPACTION_TURNS)} FROM compactions"
        " WHERE turn_id = ?",
        (turn_id,),
    ).fetchone()
    if row is None:
        return None
    *columns, through, first_kept = row
    out = dict(zip(COMPACTION_COLUMNS, columns, strict=True))
    out["summarized_through"] = positions.get(through) if through is not None else None
    out["first_kept"] = positions.get(first_kept) if first_kept is not None else None
    return out


def _turn_line(conn: sqlite3.Connection, turn_id: str, positions: dict[str, int]) -> dict[str, Any]:
    turn = conn.execute(
        f"SELECT {', '.join(TURN_COLUMNS)} FROM turns WHERE id = ?", (turn_id,)
    ).fetchone()
    line: dict[str, Any] = {"type": "turn", **dict(zip(TURN_COLUMNS, turn, strict=True))}
    for column in JSON_TURN_COLUMNS:
        if line[column] is not None:
            line[column] = orjson.loads(line[column])
    line["messages"] = [
        dict(zip(MESSAGE_COLUMNS, r, strict=True))
        for r in conn.execute(
            f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages WHERE turn_id = ? ORDER BY seq",
            (turn_id,),
        )
    ]
    line["tool_calls"] = [
        dict(zip(TOOL_COLUMNS, r, strict=True))
        for r in conn.execute(
            f"SELECT {', '.join(TOOL_COLUMNS)} FROM tool_calls WHERE turn_id = ? ORDER BY seq",
            (turn_id,),
        )
    ]
    if line["type"] == "compaction":
        compaction = _compaction(conn, turn_id, positions)
        if compaction is not None:
            line["compaction"] = compaction
    line["files"] = snapshots.turn_files(conn, turn_id)
    line["events"] = [
        {"type": kind, "payload": orjson.loads(payload)}
        for kind, payload in conn.execute(
            "SELECT type, payload FROM turn_events WHERE turn_id = ? ORDER BY seq", (turn_id,)
        )
    ]
    return line


class ImportError_(ValueError):
    """The file is not an export this broker can read; the message says where."""


def import_lines(
    conn: sqlite3.Connection, lines: Iterable[bytes | str], label: str | None, now: int
) -> tuple[str, int]:
    """Read an export into a new session; return its label and the number of turns."""
    it = iter(lines)
    header = _parse(next(it, b""), 1)
    if header.get("type") != "header" or header.get("format") != EXPORT_FORMAT:
        raise ImportError_("line 1: not an agent-broker session export")
    if header.get("version") not in READS_VERSIONS:
        raise ImportError_(f"line 1: export version {header.get('version')} is not supported")
    label = label or f"import:{new_id()}"
    if not label_free(conn, label):
        raise Conflict(f"the label {label!r} is taken", field="label")
    conn.execute(
        "INSERT INTO sessions (label, kind, persona, origin, status, created_at, updated_at,"
        " updated_block) VALUES (?, 'import', ?, 'import', 'active', ?, ?, ?)",
        (label, header.get("persona"), now, now, block_of(now)),
    )
    parent: str | None = None
    count = 0
    made: list[str] = []  # the new turns' ids, in the order of their lines
    for number, raw in enumerate(it, start=2):
        turn = _parse(raw, number)
        if turn.get("type") == "audit":  # the history of the session where it was
            try:
                audit.load_line(conn, turn, number)
            except ValueError as exc:
                raise ImportError_(str(exc)) from exc
            continue
        if turn.get("type") == "blob":
            try:
                snapshots.load_blob_line(conn, turn, now)
            except ValueError as exc:
                raise ImportError_(f"line {number}: {exc}") from exc
            continue
        if not isinstance(turn.get("messages"), list):  # a blob line
            raise ImportError_(f"line {number}: expected a turn or a blob")
        parent = _insert_turn(conn, turn, label, parent, number)
        if "compaction" in turn:
            _insert_compaction(conn, turn["compaction"], parent, label, made, number)
        made.append(parent)
        count += 1
    conn.execute(
        "UPDATE sessions SET head_turn_id = ?, turns = ? WHERE label = ?", (parent, count, label)
    )
    conn.execute(
        "INSERT INTO session_history (session_label, turn_id, prev_turn_id, reason, changed_at)"
        " VALUES (?, ?, NULL, 'import', ?)",
        (label, parent, now),
    )
    return label, count


def _parse(raw: bytes | str, number: int) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ImportError_(f"line {number}: not JSON ({exc.msg})") from exc
    if not isinstance(value, dict):
        raise ImportError_(f"line {number}: not a JSON object")
    return value


def _insert_turn(
    conn: sqlite3.Connection, turn: dict[str, Any], label: str, parent: str | None, number: int
) -> str:
    turn_id = new_id()
    try:
        values = [
            turn[c] if c in turn or c not in OPTIONAL_TURN_COLUMNS else None
            for c in TURN_COLUMNS[1:]
        ]
        for column in JSON_TURN_COLUMNS:
            n = TURN_COLUMNS.index(column) - 1
            if values[n] is not None:
                if not isinstance(values[n], dict):
                    raise ValueError(f"a turn's {column} must be a JSON object or null")
                values[n] = orjson.dumps(values[n]).decode()
        conn.execute(
            f"INSERT INTO turns (id, session_label, parent_id, {', '.join(TURN_COLUMNS[1:])})"
            f" VALUES (?, ?, ?, {', '.join('?' * (len(TURN_COLUMNS) - 1))})",
            (turn_id, label, parent, *values),
        )
        conn.executemany(
            f"INSERT INTO messages (turn_id, seq, {', '.join(MESSAGE_COLUMNS)})"
            f" VALUES (?, ?, {', '.join('?' * len(MESSAGE_COLUMNS))})",
            [
                (turn_id, n, *(m[c] for c in MESSAGE_COLUMNS))
                for n, m in enumerate(turn["messages"])
            ],
        )
        conn.executemany(
            f"INSERT INTO tool_calls (id, turn_id, seq, {', '.join(TOOL_COLUMNS)})"
            f" VALUES (?, ?, ?, {', '.join('?' * len(TOOL_COLUMNS))})",
            [
                (new_id(), turn_id, n, *(t[c] for c in TOOL_COLUMNS))
                for n, t in enumerate(turn["tool_calls"])
            ],
        )
        events = turn.get("events", [])
        first = take_session_seqs(conn, label, len(events)) or 1
        conn.executemany(
            "INSERT INTO turn_events (turn_id, seq, session_label, type, payload, created_at,"
            " session_seq) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    turn_id,
                    n,
                    label,
                    e["type"],
                    orjson.dumps(e["payload"]).decode(),
                    turn["completed_at"],
                    first + n,
                )
                for n, e in enumerate(events)
            ],
        )
        snapshots.insert_files(conn, turn_id, label, turn.get("files", []))
    except ValueError as exc:
        raise ImportError_(f"line {number}: {exc}") from exc
    except _BAD_TURN as exc:
        raise ImportError_(f"line {number}: a turn with a missing or bad field ({exc})") from exc
    return turn_id


def _insert_compaction(
    conn: sqlite3.Connection,
    row: Any,
    turn_id: str,
    label: str,
    made: list[str],
    number: int,
) -> None:
    """The `compactions` row a compaction turn's line carries, its turns mapped to
    the new ones."""
    if not isinstance(row, dict):
        raise ImportError_(f"line {number}: `compaction` is not a JSON object")
    turns: list[str | None] = []
    for key in ("summarized_through", "first_kept"):
        at = row.get(key)
        if at is None:
            turns.append(None)
        elif type(at) is int and 0 <= at < len(made):
            turns.append(made[at])
        else:
            raise ImportError_(
                f"line {number}: `compaction.{key}` is not the position of an earlier turn"
            )
    for column, kind in zip(COMPACTION_COLUMNS[:4], (str, int, str, int), strict=True):
        if type(row.get(column)) is not kind:
            raise ImportError_(
                f"line {number}: `compaction.{column}` is missing or not a {kind.__name__}"
            )
    values = [row.get(c) for c in COMPACTION_COLUMNS]
    values[COMPACTION_COLUMNS.index("fallback")] = row.get("fallback") or 0
    try:
        conn.execute(
            "INSERT INTO compactions (turn_id, session_label,"
            f" {', '.join(COMPACTION_COLUMNS + _COMPACTION_TURNS)}) VALUES"
            f" (?, ?, {', '.join('?' * (len(COMPACTION_COLUMNS) + 2))})",
            (turn_id, label, *values, *turns),
        )
    except driver.InterfaceError + driver.ProgrammingError + driver.IntegrityError as exc:
        raise ImportError_(f"line {number}: a compaction with a bad field ({exc})") from exc
