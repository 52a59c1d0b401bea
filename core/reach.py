"""Reach: which sessions a turn's broker tools may touch.

Pure code, no I/O. A turn acts for its session's owner (`owner_of`, the rule of
core/bindings.py that `route.bind` and `/switch` use): the canonical entity of a
DM session, followed through forks and workers, or the group session itself.
The ledger walks the rows for it inside the transaction that the check guards,
so the answer is the one true when that transaction commits.

A turn reaches a session only when both have an owner and it is the same one,
unless the turn's route granted reach "any" (a rule that matches owners alone:
policies/model.py). A session that does not exist has no owner and is never
reached, so "not yours" and "no such session" are one answer (`REFUSED`), and a
model cannot learn from it whether another person's session exists.
An entity (a person, for `propose_merge`) is reached as its owner: the turn
reaches the entity when the entity's canonical root is the turn's own owner, or
it spoke in a session the turn reaches (a fellow member of its group), or the
turn's route granted reach "any"; an entity that does not exist is never reached.
Owners compare by canonical entity, so an identity merge widens reach to the
merged person's sessions from the moment the merge commits, and not before.
"""

from __future__ import annotations

from typing import Literal

from core.bindings import Owner, SessionLink, owner_of

__all__ = [
    "REFUSED",
    "Owner",
    "Reach",
    "SessionLink",
    "may_reach",
    "may_reach_entity",
    "owner_of",
]

Reach = Literal["own", "any"]

# The one sentence for every refusal: it names nothing the caller did not give.
REFUSED = "That is not one of this conversation's sessions, so this tool cannot use it."


def may_reach(actor: Owner | None, target: Owner | None, reach: Reach = "own") -> bool:
    """Whether a turn acting for `actor` may touch a session owned by `target`.

    `target` None is a session (or turn) that does not exist: never reached, even
    with reach "any", so that a refused call and a missing one answer alike.
    """
    if target is None or actor is None:
        return False
    return reach == "any" or actor == target


def may_reach_entity(
    actor: Owner | None, root: str | None, heard: bool, reach: Reach = "own"
) -> bool:
    """Whether a turn acting for `actor` may name the entity whose canonical root is
    `root` (None: no such entity); `heard`: it spoke in a session the turn reaches."""
    if root is None or actor is None:
        return False
    return reach == "any" or actor == ("entity", root) or heard
