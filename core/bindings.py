"""Route bindings: a conversation talks to a session of its person's choosing.

Pure code, no I/O. The ledger (`ledger/bindings.py`) stores the bindings and walks
the sessions through the callbacks given here.

A session belongs to an owner: a DM session to the canonical root of its entity, a
fork or a worker to the owner of the session it came from, any other session (a
group's, an import) to itself. A conversation may be bound only to a session with
the owner of the session it talks to now, so a person can never be moved into
someone else's history.

A binding leads only to a session that is active: one merged into another leads to
where the merge went; a closed one is ignored, and the route's own session key
decides, as if there were no binding. A conversation is (channel, peer kind, peer
id, thread), and no thread is the empty string in the stored key, so the key stays
unique.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from core.identity import SessionRef

BoundBy = Literal["fork", "switch", "operator"]
Owner = tuple[Literal["entity", "session"], str]


@dataclass(frozen=True, slots=True)
class Conversation:
    channel: str
    peer_kind: str
    peer_id: str
    thread_id: str | None

    def key(self) -> tuple[str, str, str, str]:
        """The stored key (no thread: the empty string)."""
        return (self.channel, self.peer_kind, self.peer_id, self.thread_id or "")


@dataclass(frozen=True, slots=True)
class SessionLink:
    """What a session's owner is decided from, of its row."""

    label: str
    kind: str
    entity: str | None
    parent: str | None  # the session a fork or a worker came from


def owner_of(
    label: str,
    link_of: Callable[[str], SessionLink | None],
    root_of: Callable[[str], str],
) -> Owner | None:
    """The owner of session `label`; None when there is no such session."""
    link = link_of(label)
    if link is None:
        return None
    seen = {label}
    while True:
        if link.kind == "dm" and link.entity is not None:
            return ("entity", root_of(link.entity))
        if link.parent is None or link.parent in seen:
            return ("session", link.label)
        parent = link_of(link.parent)
        if parent is None:  # the session it came from is gone: it stands alone
            return ("session", link.label)
        seen.add(parent.label)
        link = parent


def refusal(
    conversation_owner: Owner | None, target: str, target_owner: Owner | None
) -> str | None:
    """Why the conversation may not be bound to `target` (another owner), or None."""
    if target_owner is None:
        return f"There is no session named {target}."
    if conversation_owner != target_owner:
        return f"{target} is not one of your sessions."
    return None


def bound_label(
    bound: SessionRef | None, get_session: Callable[[str], SessionRef | None]
) -> str | None:
    """Where a stored binding leads (following merges): a label, or None to route as usual."""
    seen: set[str] = set()
    current = bound
    while current is not None and current.label not in seen:
        seen.add(current.label)
        if current.status == "active":
            return current.label
        if current.status != "merged" or current.merged_into is None:
            return None
        current = get_session(current.merged_into)
    return None


# -- what the chat commands answer ---------------------------------------------


def forked_reply(source: str, fork: str) -> str:
    return (
        f"Forked {source} at its latest turn. This conversation now talks to {fork};"
        f" /switch {source} goes back."
    )


def switched_reply(target: str, previous: str) -> str:
    if target == previous:
        return f"This conversation already talks to {target}."
    return f"This conversation now talks to {target}; /switch {previous} goes back."


NOTHING_TO_FORK = "There is nothing to fork yet: this conversation has no turns."
SWITCH_USAGE = "usage: /switch <session label>"
