"""Reach in the ledger: the owners `core/reach.py` compares, read inside the
transaction that acts on the answer.

Every function here takes the caller's connection and reads only; a dispatch or a
recall calls `reaches` (or `turn_reaches`) in its own transaction, so what was
checked is what is written or read. A route that granted reach "any" is given as
the contacts it was granted to (`wide`): the turn has it when its owner is the
canonical entity of one of them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection

from core.bindings import Owner
from core.reach import Reach, may_reach
from ledger.bindings import contact_owner, session_owner
from ledger.merge import set_members

__all__ = ["reach_of", "reachable", "reaches", "session_owner", "turn_reaches"]

Contact = tuple[str, str]  # (channel, sender_id)


def reach_of(conn: sqlite3.Connection, actor: Owner | None, wide: Collection[Contact]) -> Reach:
    """`any` when `actor` is the owner of a contact in `wide`, else `own`."""
    if actor is None or actor[0] != "entity" or not wide:
        return "own"
    return "any" if any(contact_owner(conn, c, s) == actor for c, s in wide) else "own"


def reaches(
    conn: sqlite3.Connection, session: str, target: str, wide: Collection[Contact] = ()
) -> bool:
    """Whether a turn of `session` may touch session `target` (a label)."""
    if target == session:
        return True
    actor = session_owner(conn, session)
    return may_reach(actor, session_owner(conn, target), reach_of(conn, actor, wide))


def turn_session(conn: sqlite3.Connection, turn: str) -> str | None:
    row = conn.execute("SELECT session_label FROM turns WHERE id = ?", (turn,)).fetchone()
    return None if row is None else str(row[0])


def turn_reaches(
    conn: sqlite3.Connection, session: str, turn: str, wide: Collection[Contact] = ()
) -> bool:
    """Whether a turn of `session` may touch turn `turn` (one of the sessions it reaches)."""
    target = turn_session(conn, turn)
    return target is not None and reaches(conn, session, target, wide)


def reachable(
    conn: sqlite3.Connection, session: str, wide: Collection[Contact] = ()
) -> list[str] | None:
    """Every session a turn of `session` reaches, itself first; None: all (reach "any").

    The candidates are the owner's own sessions (a person's DM sessions, or the group
    session) and every session that came from them, forks and workers, walked down
    `parent_session`; each is kept only if `owner_of` agrees, so this is the same rule.
    """
    actor = session_owner(conn, session)
    if reach_of(conn, actor, wide) == "any":
        return None
    if actor is None:
        return [session]
    if actor[0] == "entity":
        members = set_members(conn, actor[1])
        marks = ",".join("?" * len(members))
        found = conn.execute(
            f"SELECT label FROM sessions WHERE kind = 'dm' AND entity_id IN ({marks})", members
        ).fetchall()
        roots = [str(r[0]) for r in found]
    else:
        roots = [actor[1]]
    seen = dict.fromkeys([session, *roots])
    frontier = list(seen)
    while frontier:
        marks = ",".join("?" * len(frontier))
        rows = conn.execute(
            f"SELECT label FROM sessions WHERE parent_session IN ({marks})", frontier
        ).fetchall()
        frontier = [str(r[0]) for r in rows if str(r[0]) not in seen]
        seen.update(dict.fromkeys(frontier))
    return [label for label in seen if session_owner(conn, label) == actor]
