"""Identity: the union-find rules over entities, session keys, and label resolution.

Pure code, no I/O. The union-find itself is the ledger's `entities` table
(`merged_into` is the parent), walked by `ledger.ingest.find_root` and joined
by `ledger.merge.merge_entities` with the two functions below.

The canonical root of a merged set is its smallest entity id, which, ids being
ULIDs, is the oldest entity; the choice does not depend on the order of merges, so
replaying merges in any order gives the same partition and the same roots. Finding
a root never changes which root a node reaches: path compression only shortens the
chain. A label resolves by direct label first (following a merged session to its
primary), then by alias, and only then is a new session created.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, NamedTuple

from core.resets import ResetPolicy

PeerKind = Literal["dm", "group"]


def canonical_pair(root_a: str, root_b: str) -> tuple[str, str]:
    """Return (root, child) for two distinct roots: the smaller id wins."""
    return (root_a, root_b) if root_a < root_b else (root_b, root_a)


def chain_to_root(node: str, parent_of: Callable[[str], str | None]) -> list[str]:
    """The path from `node` to its root, both included. Raises on a cycle."""
    path = [node]
    seen = {node}
    while (parent := parent_of(path[-1])) is not None:
        if parent in seen:
            raise ValueError(f"merged_into cycle through {parent!r}")
        seen.add(parent)
        path.append(parent)
    return path


@dataclass(frozen=True, slots=True)
class Route:
    """Where a message came from, as the session-key templates see it."""

    channel: str
    peer_kind: PeerKind
    peer_id: str
    thread_id: str | None
    sender_id: str
    entity: str  # the canonical entity of the sender


class SessionSpec(NamedTuple):  # a named tuple: it goes to the writer process with each message
    """What the routing policy decided for a message before it is written."""

    key_template: str | None
    persona: str | None
    reset: ResetPolicy | None = None  # None: no reset policy applies


DM_TEMPLATE = "dm:{entity}"
GROUP_TEMPLATE = "group:{channel}:{peer}"
THREAD_SUFFIX = ":thread:{thread}"


def default_template(route: Route) -> str:
    if route.peer_kind == "dm":
        return DM_TEMPLATE
    return GROUP_TEMPLATE + (THREAD_SUFFIX if route.thread_id else "")


def build_session_key(route: Route, template: str | None = None) -> str:
    """Fill a session-key template from the route.

    Placeholders: {entity}, {channel}, {peer}, {thread}, {sender}. A template
    that names {thread} for a message without a thread drops the thread part.
    """
    tpl = template or default_template(route)
    if route.thread_id is None and THREAD_SUFFIX in tpl:
        tpl = tpl.replace(THREAD_SUFFIX, "")
    return tpl.format(
        entity=route.entity,
        channel=route.channel,
        peer=route.peer_id,
        thread=route.thread_id or "",
        sender=route.sender_id,
    )


TEMPLATE_FIELDS = frozenset({"entity", "channel", "peer", "thread", "sender"})


@dataclass(frozen=True, slots=True)
class SessionRef:
    label: str
    status: str
    merged_into: str | None


@dataclass(frozen=True, slots=True)
class Resolved:
    label: str | None  # None: nothing found, the caller creates `key`
    via: Literal["label", "merged", "alias", "create"]


def resolve_label(
    key: str,
    get_session: Callable[[str], SessionRef | None],
    get_alias: Callable[[str], str | None],
) -> Resolved:
    """Resolve a session key: direct label, then alias, then create."""
    session = get_session(key)
    if session is not None:
        if session.status == "merged" and session.merged_into:
            return Resolved(_follow_merged(session, get_session), "merged")
        return Resolved(session.label, "label")
    target = get_alias(key)
    if target is not None:
        aliased = get_session(target)
        if aliased is not None and aliased.status == "merged" and aliased.merged_into:
            return Resolved(_follow_merged(aliased, get_session), "alias")
        return Resolved(target, "alias")
    return Resolved(None, "create")


def _follow_merged(session: SessionRef, get_session: Callable[[str], SessionRef | None]) -> str:
    seen = {session.label}
    current = session
    while current.status == "merged" and current.merged_into:
        nxt = get_session(current.merged_into)
        if nxt is None or nxt.label in seen:
            break
        seen.add(nxt.label)
        current = nxt
    return current.label


@dataclass(frozen=True, slots=True)
class DmCandidate:
    label: str
    turns: int
    last_activity: int


def pick_primary(candidates: Iterable[DmCandidate]) -> str:
    """The primary DM session of a merged set: most turns, then latest activity.

    A final tie goes to the smaller label so the choice is deterministic.
    """
    best = min(candidates, key=lambda c: (-c.turns, -c.last_activity, c.label))
    return best.label
