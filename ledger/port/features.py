"""The ledger port's parts for timers, threads, file snapshots, route bindings and
titles; `ledger/port/protocols.py` composes them into `LedgerPort` (its rules hold here too)."""

from __future__ import annotations

from typing import Any, Protocol

from core.bindings import Conversation
from core.closing import IdleClose
from core.timers import TimerSpec
from ledger.port.committing import Committing
from ledger.port.records import BindCommand, ItemInfo, LeaseTaking, OneTimer, TimerInfo


class TimerPort(Protocol):
    """Timers (`ledger/timers.py`): the ops add, list and cancel them; the wheel
    (`broker/timers.py`) asks when the next is due and fires the due ones."""

    async def add_timer(self, session: str, spec: TimerSpec, now: int) -> TimerInfo:
        """A live timer on `session` (a label or an alias); a `system:<purpose>` label
        that does not exist is created; any other unknown name raises `NotFound`."""
        ...

    async def list_timers(self, session: str | None) -> list[TimerInfo]:
        """Live timers, soonest first, of one session or all."""
        ...

    async def cancel_timer(self, timer: str, now: int) -> None:
        """End a live timer; `NotFound` if there is no live timer of that id."""
        ...

    async def next_timer_at(self) -> int | None:
        """The earliest due time of a live timer (ms), or None."""
        ...

    async def fire_due_timers(self, now: int, limit: int) -> list[ItemInfo]:
        """Fire up to `limit` timers due at `now`, each with its queue item and its
        `fired`/`next_at` update in one transaction: exactly once per due time."""
        ...

    async def fire_timer(self, timer: str, now: int) -> OneTimer:
        """Fire the one timer `timer` if it is live and due at `now`, as
        `fire_due_timers` would; its items and when it is next due (None: never)."""
        ...


class ThreadPort(Protocol):
    """Threads and resets (ledger/threads.py, ledger/resets.py), cancelling a
    waiting item and closing a session (ledger/closing.py), as the ops ask for them."""

    async def reset_session(self, session: str, reason: str, now: int) -> int:
        """Decide a new thread of `session` (a label), pending until its actor's cut;
        its number. `NotFound` for an unknown session."""
        ...

    async def list_threads(self, session: str) -> list[dict[str, Any]]:
        """`session.threads` of a label: `{"thread","head","turns","started_at",
        "ended_at","reason"}` oldest first."""
        ...

    async def cancel_item(self, session: str, item: str, now: int) -> None:
        """Mark a waiting item `cancelled` (reason `cancelled`): `NotFound` for an item
        not of `session`, `Conflict` for one that is not waiting."""
        ...

    async def close_session(self, session: str, summary: str | None, now: int) -> dict[str, Any]:
        """Close `session` (a label or an alias): `{"session","ended_at","closing_summary",
        "source"}` (`source`: `given` or `mechanical`). `NotFound` for an unknown session,
        `Conflict` for one not active or with queued or running items or live timers;
        either way nothing is written."""
        ...

    async def close_idle(self, policy: IdleClose, now: int) -> list[dict[str, Any]]:
        """Close a batch of the sessions no person has written to for their idle limit
        at `now` (core/closing.py), each as `close_session` would with no summary; what
        it answered for each. Empty: none closed, so none is left to close now, or those
        found changed before the write (a person wrote, work came) and wait."""
        ...


class SnapshotPort(Protocol):
    """File snapshots by content (ledger/snapshots.py): a turn's `file` events are
    stored with it by `submit_turn`; these read them back and collect blobs."""

    snapshot_max_bytes: int  # a content over this is kept by hash and size only

    async def file_history(self, session: str, path: str) -> list[dict[str, Any]]:
        """Each change of `path` on the session's thread, oldest first: `{"turn", "seq",
        "op", "before", "sha256", "bytes", "stored", "note"}`; NotFound if none."""
        ...

    async def file_at(self, session: str, path: str, turn: str | None) -> dict[str, Any]:
        """The file after `turn` (default: the head): `{"path", "turn", "changed_in",
        "op", "sha256", "bytes", "stored"}` and `content` (UTF-8 text) or `content_b64`,
        or a `note` when not stored; NotFound where it did not exist then."""
        ...

    async def file_list(self, session: str) -> list[dict[str, Any]]:
        """Each path the session's thread touched, with its latest change."""
        ...

    async def snapshots_gc(self) -> dict[str, int]:
        """Remove blobs no snapshot names: `{"blobs", "bytes"}` removed."""
        ...


class RoutePort(Protocol):
    """Route bindings (ledger/bindings.py): a conversation talks to a session of its
    person's choosing; ingest applies them, these make and list them."""

    async def route_bind(self, conversation: Conversation, session: str, now: int) -> str:
        """Bind the conversation to `session` (a label or an alias): the label. `NotFound`
        for an unknown session or a conversation never heard from, `Conflict` for a
        session of another person; either way nothing is written."""
        ...

    async def route_unbind(self, conversation: Conversation) -> str:
        """Remove the binding: the label it led to; `NotFound` when there was none."""
        ...

    async def route_list(self, session: str | None) -> list[dict[str, Any]]:
        """The bindings, of one session or all, oldest first."""
        ...

    def submit_chat_bind(self, cmd: BindCommand, now: int) -> Committing[str]:
        """`/fork` or `/switch`: the fork, the binding, the command item done and its
        reply's outbox row in one transaction; the reply's frame as written."""
        ...


class TitlePort(Protocol):
    """Titles written after a turn (broker/titler.py)."""

    async def set_title(self, turn_id: str, title: str, source: str) -> bool:
        """Replace a committed turn's mechanical title; False (nothing written) when the
        turn is unknown or its title is not mechanical."""
        ...


class EmbeddingPort(Protocol):
    """The sentence vectors of recall by meaning (broker/recall_indexer.py)."""

    async def embeddings_pending(self, limit: int) -> tuple[int, int, list[tuple[int, str, str]]]:
        """(the indexer's mark, the last message id of the next `limit` after it, the
        (id, session, content) of those to embed)."""
        ...

    async def embeddings_store(self, through: int, rows: list[tuple[int, str, str, bytes]]) -> int:
        """Store (id, session, encoded content, float32 vector) rows whose message still
        holds that content, and move the mark to `through`; the count stored."""
        ...

    async def embeddings_counts(self) -> tuple[int, int]:
        """(vectors stored, the indexer's mark)."""
        ...


class HandoffPort(Protocol):
    """Hand-offs of items to their session's runtime, recorded for a cluster
    (ledger/handoffs.py)."""

    async def unhanded_items(self, before_ms: int, limit: int) -> list[ItemInfo]:
        """Queued items created before `before_ms` with no hand-off recorded."""
        ...

    async def unhanded_before(self, session: str, seq: int) -> list[ItemInfo]:
        """A session's queued items ahead of `seq` with no hand-off recorded."""
        ...

    def submit_items_handed(self, item_ids: list[str], now: int) -> Committing[None]:
        """Record, lazily, that these items' hand-offs landed."""
        ...


class LeasePort(Protocol):
    """Session leases for a cluster: which attempt of a turn may run it
    (ledger/leases.py)."""

    async def take_lease(
        self, session: str, holder: str, now: int | None, ttl_ms: int
    ) -> LeaseTaking:
        """Take the session's lease if it is free; else who holds it, until when. With
        `now` None the lease counts from when the write runs (its expiry says when)."""
        ...

    async def renew_lease(
        self, session: str, token: int, now: int | None, ttl_ms: int
    ) -> int | None:
        """Hold it longer: the new expiry (ms); None once another taking has it."""
        ...

    def submit_release_lease(self, session: str, token: int) -> Committing[None]:
        """Let it go, if this taking still holds it: lazily (it joins the writer's next
        batch), so a release costs no transaction of its own."""
        ...
