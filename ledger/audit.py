"""The audit trail: one row per operator op that changed something or was refused,
and per refused agent tool call (the `audit` table, migration 0023_audit).

A row is appended by the transaction of the change it records (`append`, called
from inside that transaction's job), so a change and its row commit together or
not at all. A row holds the time, the operator's uid and role (none for an agent's
tool call), the op or tool, the session label, entity id or turn id acted on, and
the outcome: never message text, tool arguments or secrets. The table is
append-only (its triggers refuse the rest); the one rewrite is `forget`, for the
erasure of a person, which replaces their ids by '[erased]'.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import Any, Literal

from ledger.port.audit import ACTING, Acting, Row
from plumbing.ids import new_id

__all__ = [
    "ACTING",
    "Acting",
    "Row",
    "append",
    "forget",
    "forget_turns_of",
    "rows",
    "run_audited",
]

Outcome = Literal["ok", "refused"]
ERASED = "[erased]"
TARGET_MAX = 256  # characters of `target` kept: a label or an id is shorter


def append(
    conn: sqlite3.Connection,
    *,
    at: int,
    op: str,
    target: str | None,
    outcome: Outcome,
    uid: int | None = None,
    role: str | None = None,
) -> None:
    """Append one row, inside the caller's transaction (the change it records)."""
    conn.execute(
        "INSERT INTO audit (id, at, uid, role, op, target, outcome) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            new_id(),
            at,
            uid,
            role,
            op[:64],
            None if target is None else target[:TARGET_MAX],
            outcome,
        ),
    )


def append_job(
    conn: sqlite3.Connection,
    at: int,
    op: str,
    target: str | None,
    outcome: Outcome,
    uid: int | None,
    role: str | None,
) -> None:
    """`append` as a writer job of its own: for a refusal, which changes nothing else."""
    append(conn, at=at, op=op, target=target, outcome=outcome, uid=uid, role=role)


def rows(
    conn: sqlite3.Connection, since: int | None, op: str | None, limit: int
) -> list[dict[str, Any]]:
    """The latest `limit` rows at or after `since`, of `op` if given, oldest first."""
    where: list[str] = []
    params: list[object] = []
    if since is not None:
        where.append("at >= ?")
        params.append(since)
    if op is not None:
        where.append("op = ?")
        params.append(op)
    sql = "SELECT at, uid, role, op, target, outcome FROM audit"
    if where:
        sql += " WHERE " + " AND ".join(where)
    found = conn.execute(sql + " ORDER BY at DESC, id DESC LIMIT ?", (*params, limit)).fetchall()
    keys = ("at", "uid", "role", "op", "target", "outcome")
    return [dict(zip(keys, r, strict=True)) for r in reversed(found)]


def rows_about(conn: sqlite3.Connection, targets: list[str]) -> list[dict[str, Any]]:
    """The rows whose target is one of `targets` (a session and its turns), oldest
    first: what an export of the session carries."""
    out: list[dict[str, Any]] = []
    keys = ("at", "uid", "role", "op", "target", "outcome")
    for start in range(0, len(targets), 500):
        part = targets[start : start + 500]
        found = conn.execute(
            "SELECT at, uid, role, op, target, outcome, id FROM audit"
            f" WHERE target IN ({','.join('?' * len(part))})",
            part,
        ).fetchall()
        out.extend({**dict(zip(keys, r[:6], strict=True)), "id": r[6]} for r in found)
    out.sort(key=lambda r: (r["at"], r["id"]))
    for r in out:
        del r["id"]
    return out


def load_line(conn: sqlite3.Connection, line: dict[str, Any], number: int) -> None:
    """An export's `audit` line appended as it was (an import carries the history)."""
    outcome = line.get("outcome")
    if (
        not isinstance(line.get("at"), int)
        or not isinstance(line.get("op"), str)
        or outcome not in ("ok", "refused")
    ):
        raise ValueError(f"line {number}: an audit line needs at, op and outcome")
    uid, role, target = line.get("uid"), line.get("role"), line.get("target")
    append(
        conn,
        at=line["at"],
        op=line["op"],
        target=target if isinstance(target, str) else None,
        outcome="ok" if outcome == "ok" else "refused",
        uid=uid if isinstance(uid, int) else None,
        role=role if isinstance(role, str) else None,
    )


def forget_turns_of(conn: sqlite3.Connection, sessions: list[str]) -> int:
    """`forget` the ids of every turn of `sessions`, while those turns still exist."""
    total = 0
    for start in range(0, len(sessions), 500):
        part = sessions[start : start + 500]
        cur = conn.execute(
            "UPDATE audit SET target = ? WHERE target IN (SELECT id FROM turns"
            f" WHERE session_label IN ({','.join('?' * len(part))}))",
            (ERASED, *part),
        )
        total += max(cur.rowcount, 0)
    return total


def forget(conn: sqlite3.Connection, ids: Iterable[str]) -> int:
    """Replace every `target` among `ids` (a person's entities, sessions and turns) by
    '[erased]', inside the erasure's transaction; the rows stay. The count rewritten."""
    total = 0
    for target in set(ids):
        cur = conn.execute("UPDATE audit SET target = ? WHERE target = ?", (ERASED, target))
        total += max(cur.rowcount, 0)
    return total


def run_audited(
    conn: sqlite3.Connection, row: Row, fn: Callable[..., Any], *args: Any, **kw: Any
) -> Any:
    """Run the job `fn`, then append the op's row in the same transaction: the change
    and its row commit together, and a job that raises leaves neither."""
    value = fn(conn, *args, **kw)
    append(conn, at=row.at, op=row.op, target=row.target, outcome="ok", uid=row.uid, role=row.role)
    return value
