"""Merge proposals: kept, listed and decided (the `merge_proposals` table).

An agent's `propose_merge` is checked in the transaction that records it: both
entities must be ones its turn reaches (core/reach.py `may_reach_entity`), else the
call is refused with the one sentence of every refusal, audited in that same
transaction, and nothing else is written. Proposing what is already pending again
answers the pending proposal, and two entities already one person are refused.

A decision is one transaction: the status moves once (core/proposals.py), and an
accepted proposal runs the merge of `entity.merge {from: contact, into: person}`
(ledger/merge.py) beside it, so a proposal is never accepted without its merge nor
merged twice. An owner's `/merge yes N` is also the command item marked done and
its reply's outbox row, as `/fork` is (ledger/binding_jobs.py); it writes its own
audit row (an operator's op has its row carried by the op, broker/ops/audit.py).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from core import proposals as rules
from core.reach import may_reach_entity
from ledger import audit
from ledger import reach as reach_rows
from ledger.ingest import find_root, identity_of
from ledger.merge import merge_entities, set_members
from ledger.port.errors import Conflict, Invalid, NotFound
from ledger.port.records import MergeCommand, MergeResult, Reaching
from ledger.turns import command_done

__all__ = ["chat_merge", "decide", "forget", "listing", "propose"]

COLUMNS = "id, contact, person, reason, session_label, status, created_at, decided_at, decided_by"


def _row(r: tuple[Any, ...]) -> dict[str, Any]:
    keys = ("proposal", "contact", "person", "reason", "session", "status")
    out = dict(zip(keys, r[:6], strict=True))
    out["proposal"] = int(out["proposal"])
    out.update(created_at=int(r[6]), decided_at=r[7], decided_by=r[8])
    return out


def _root(conn: sqlite3.Connection, entity: str) -> str | None:
    if conn.execute("SELECT 1 FROM entities WHERE id = ?", (entity,)).fetchone() is None:
        return None
    return find_root(conn, identity_of(conn), entity)


def _reached(conn: sqlite3.Connection, by: Reaching, root: str | None) -> bool:
    """Whether the turn of `by` reaches the entity whose canonical root is `root`."""
    actor = reach_rows.session_owner(conn, by.session)
    wide = reach_rows.reach_of(conn, actor, by.wide)
    if root is None or may_reach_entity(actor, root, False, wide):
        return root is not None and actor is not None
    sessions = reach_rows.reachable(conn, by.session, by.wide) or [by.session]
    members = set_members(conn, root)
    heard = conn.execute(
        f"SELECT 1 FROM inbound WHERE entity_id IN ({','.join('?' * len(members))})"
        f" AND session_label IN ({','.join('?' * len(sessions))}) LIMIT 1",
        [*members, *sessions],
    ).fetchone()
    return may_reach_entity(actor, root, heard is not None, wide)


def propose(
    conn: sqlite3.Connection,
    by: Reaching,
    turn: str | None,
    contact: str,
    person: str,
    reason: str,
    now: int,
) -> dict[str, Any] | None:
    """The writer job for the `propose_merge` tool: the proposal, or None when the
    turn does not reach both entities (audited here)."""
    try:
        contact, person, reason = rules.check_proposal(contact, person, reason)
    except ValueError as exc:
        raise Invalid(str(exc), field="reason" if "reason" in str(exc) else "contact") from exc
    roots = _root(conn, contact), _root(conn, person)
    if not all(_reached(conn, by, root) for root in roots):
        audit.append(conn, at=now, op=by.tool, target=by.session, outcome="refused")
        return None
    if roots[0] == roots[1]:
        raise Conflict("they are already one person", field="person")
    row = conn.execute(
        f"SELECT {COLUMNS} FROM merge_proposals WHERE contact = ? AND person = ?"
        " AND status = 'pending' ORDER BY id LIMIT 1",
        (contact, person),
    ).fetchone()
    if row is None:
        row = conn.execute(
            "INSERT INTO merge_proposals (contact, person, reason, session_label, turn_id,"
            f" created_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING {COLUMNS}",
            (contact, person, reason, by.session, turn, now),
        ).fetchone()
    return _row(row)


def decide(
    conn: sqlite3.Connection, proposal: int, accept: bool, by: str, now: int
) -> tuple[dict[str, Any], MergeResult | None]:
    """The writer job for `merge.accept` and `merge.reject`: the proposal decided, and
    the merge an accepted one ran. `NotFound`, or `Conflict` for a decided one."""
    row = conn.execute(
        f"SELECT {COLUMNS} FROM merge_proposals WHERE id = ?", (proposal,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no merge proposal {proposal}", field="proposal")
    found = _row(row)
    try:
        status = rules.decide(found["status"], accept)
    except rules.Decided as exc:
        raise Conflict(f"merge proposal {proposal}: {exc}", field="proposal") from exc
    merged = None
    if status == "accepted":
        merged = merge_entities(conn, identity_of(conn), found["contact"], found["person"], now)
    conn.execute(
        "UPDATE merge_proposals SET status = ?, decided_at = ?, decided_by = ? WHERE id = ?",
        (status, now, by, proposal),
    )
    found.update(status=status, decided_at=now, decided_by=by)
    return found, merged


def chat_merge(
    conn: sqlite3.Connection, cmd: MergeCommand, now: int
) -> tuple[str, MergeResult | None]:
    """An owner's `/merge yes N` or `/merge no N`: the decision, its audit row, the
    command item done and the reply, in one transaction; the reply's frame as sent."""
    merged = None
    op = "merge.accept" if cmd.accept else "merge.reject"
    try:
        found, merged = decide(conn, cmd.proposal, cmd.accept, cmd.by, now)
    except (NotFound, Conflict) as exc:
        text, reason = f"{exc}.", "command:refused"
    else:
        audit.append(conn, at=now, op=op, target=found["contact"], outcome="ok", role="owner")
        text, reason = _decided_text(found, merged), "command:merge"
    frame = orjson.loads(cmd.frame)
    frame["text"] = text
    frame_json = orjson.dumps(frame).decode()
    command_done(
        conn, cmd.item_id, reason, (cmd.out_id, cmd.session, cmd.channel, frame_json), False, now
    )
    return frame_json, merged


def _decided_text(found: dict[str, Any], merged: MergeResult | None) -> str:
    n = found["proposal"]
    if merged is None:
        return f"Merge proposal {n} rejected: {found['contact']} stays apart."
    return f"Merge proposal {n} accepted: {found['contact']} is now {merged.canonical}."


def listing(
    conn: sqlite3.Connection, status: str | None, limit: int, proposal: int | None = None
) -> list[dict[str, Any]]:
    """`merge.list`, on a reader: the newest `limit` proposals (of `status` if given;
    one by its number with `proposal`), oldest first."""
    where: list[str] = []
    args: list[object] = []
    if status is not None:
        where.append("status = ?")
        args.append(status)
    if proposal is not None:
        where.append("id = ?")
        args.append(proposal)
    sql = f"SELECT {COLUMNS} FROM merge_proposals"
    if where:
        sql += " WHERE " + " AND ".join(where)
    rows = conn.execute(f"{sql} ORDER BY id DESC LIMIT ?", [*args, limit]).fetchall()
    return [_row(r) for r in reversed(rows)]


def forget(conn: sqlite3.Connection, entities: list[str], sessions: list[str]) -> None:
    """An erasure's part: the proposals naming the erased entities or made in their
    sessions go (their reasons may name the person)."""
    e = ",".join("?" * len(entities))
    conn.execute(
        f"DELETE FROM merge_proposals WHERE contact IN ({e}) OR person IN ({e})",
        [*entities, *entities],
    )
    if sessions:
        s = ",".join("?" * len(sessions))
        conn.execute(f"DELETE FROM merge_proposals WHERE session_label IN ({s})", sessions)
