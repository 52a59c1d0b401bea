"""Operator roles: which op each role may run, written once, and who has which role.

Every op belongs to one of three roles, each allowing what the one before allows:
`read` runs what changes nothing, `operate` also what changes sessions, `admin`
also what removes or copies the whole ledger. `ROLES` is the one place an op's
role is written; an op missing from it needs `admin`, so a new op is closed until
it is given one (tests/unit/test_roles.py fails meanwhile). The library's
`store.call` needs `read` for its reads and `operate` for the rest.

A connection's role is its peer uid's (`[operators]`); uid 0 and the daemon's own
uid are `admin`, whatever the configuration says. The role is decided before the
op reads anything, and an op above it answers `forbidden`.
"""

from __future__ import annotations

from typing import Any, Literal

Role = Literal["read", "operate", "admin"]
RANK: dict[str, int] = {"read": 0, "operate": 1, "admin": 2}

ROLES: dict[str, Role] = {
    # read: changes nothing
    "health": "read",
    "sessions.list": "read",
    "session.show": "read",
    "session.state": "read",
    "session.threads": "read",
    "person.sessions": "read",
    "contact.show": "read",
    "logs.follow": "read",
    "events.query": "read",
    "scratchpad.get": "read",
    "recall.search": "read",
    "file.history": "read",
    "file.at": "read",
    "file.list": "read",
    "route.list": "read",
    "timer.list": "read",
    "workers.list": "read",
    "audit.list": "read",
    "entity.show": "read",
    "merge.list": "read",
    # operate: changes sessions
    "entity.merge": "operate",
    "session.fork": "operate",
    "agent_send": "operate",
    "session.compact": "operate",
    "session.reset": "operate",
    "scratchpad.merge": "operate",
    "route.bind": "operate",
    "route.unbind": "operate",
    "timer.add": "operate",
    "timer.cancel": "operate",
    "item.cancel": "operate",
    "store.call": "operate",  # its reads need only `read` (STORE_READS)
    "entity.name": "operate",
    "entity.alias": "operate",
    "session.close": "operate",
    "merge.accept": "operate",
    "merge.reject": "operate",
    # admin: removes data, or copies all of it
    "snapshots.gc": "admin",
    "entity.erase": "admin",
}

# The calls of `store.call` that change nothing (ledger/api/served.py).
STORE_READS = frozenset(
    {
        "get",
        "list",
        "last",
        "items",
        "turns",
        "thread",
        "export",
        "adk.get",
        "adk.list",
        "adk.user_state",
    }
)

# The argument naming what an op acts on, for its audit row: the first one given.
TARGET_ARGS = ("session", "turn", "from", "entity", "label", "timer", "item", "parent_session")


def needed(op: str, args: dict[str, Any]) -> Role:
    """The role `op` with `args` needs; `admin` for an op with no role written."""
    if op == "store.call" and args.get("call") in STORE_READS:
        return "read"
    return ROLES.get(op, "admin")


def allows(have: str, need: str) -> bool:
    return RANK[have] >= RANK[need]


def role_of(uid: int | None, default_role: Role, uids: dict[int, Role], daemon_uid: int) -> Role:
    """The role of peer `uid` (None: the peer could not be told, the default role)."""
    if uid is not None and uid in (0, daemon_uid):
        return "admin"
    if uid is not None and uid in uids:
        return uids[uid]
    return default_role


def target_of(op: str, args: dict[str, Any]) -> str | None:
    """What the op acts on (a session label, entity id or turn id), for the audit row;
    never its other arguments."""
    if op == "store.call":
        inner = args.get("args")
        args = inner if isinstance(inner, dict) else {}
    target = args.get("target")
    if op == "agent_send" and isinstance(target, dict):
        args = {**target, **args}
    for key in TARGET_ARGS:
        value = args.get(key)
        if isinstance(value, str) and value:
            return value[:256]
    return None
