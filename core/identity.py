"""Identity: the union-find rules over entities, session keys, and label resolution.

Pure code, no I/O. The union-find itself is the ledger's `entities` table
(`merged_into` is the parent), walked by `ledger.ingest.find_root` and joined
by `ledger.merge.merge_entities` with the two functions below.

A merge of `from` into `into` keeps the root of `into`'s set as the root of the
joined set: the entity an operator names there (a person, say) stays canonical, and
the other set's root is linked under it, so no merge can make a cycle. Merging two
entities already in one set changes nothing. Finding a root never changes which root
a node reaches: path compression only shortens the chain. A name and a kind belong to
the person, so they are kept on the canonical root; a root that is a bare contact
when a merge links a person (or an org) under it takes that one's name and kind.

A label resolves by direct label first (following a merged session to its primary),
then by alias, and only then is a new session created.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, NamedTuple

from core.resets import ResetPolicy

PeerKind = Literal["dm", "group"]
ENTITY_KINDS = ("person", "contact", "org")
NAME_LIMIT = 200  # characters of an entity's name
ALIAS_LIMIT = 200  # characters of a manual alias, as of a session label


def link_roots(root_from: str, root_into: str) -> tuple[str, str] | None:
    """The (root, child) link that joins the sets of two roots, `into`'s root staying
    canonical; None when they are one set already."""
    if root_from == root_into:
        return None
    return root_into, root_from


def check_name(name: str) -> str:
    """An entity's name as kept: trimmed, one line, not empty. ValueError otherwise."""
    cleaned = name.strip()
    if not cleaned:
        raise ValueError("name must not be empty")
    if len(cleaned) > NAME_LIMIT:
        raise ValueError(f"name must be at most {NAME_LIMIT} characters")
    if not cleaned.isprintable():
        raise ValueError("name must be one line of printable characters")
    return cleaned


def check_kind(kind: str | None) -> str | None:
    """An entity's kind, or None to keep the current one. ValueError for another."""
    if kind is not None and kind not in ENTITY_KINDS:
        raise ValueError(f"kind must be one of {', '.join(ENTITY_KINDS)}")
    return kind


def check_alias(alias: str) -> str:
    """A manual alias is a session key, taken as given: printable, no outer spaces."""
    if not alias or alias != alias.strip():
        raise ValueError("alias must not be empty nor start or end with a space")
    if len(alias) > ALIAS_LIMIT:
        raise ValueError(f"alias must be at most {ALIAS_LIMIT} characters")
    if not alias.isprintable():
        raise ValueError("alias must be printable characters")
    return alias


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
