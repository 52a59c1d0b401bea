"""The ledger port: what the broker shell asks of a ledger, as typed records.

`ledger/store.py` `Ledger` implements it on SQLite; a second backend implements
the same Protocols and passes `tests/conformance/` unchanged.

Rule 1: records in, records out. Every value crossing the port is a record of
        `ledger/` or `broker/core/` (or a plain JSON-able value for the ops);
        no connection, cursor or function to run on one crosses it.
Rule 2: a write the shell acts on after its commit (an ack, a reply, the
        hand-off of an item to its actor) is a `submit_*` method: it queues the
        write and returns a `Committing` at once, which the submitter's own task
        awaits and then acts on; no code of the shell runs in the ledger's
        writer. Many submitters' writes share one commit, and a task that keeps
        many in flight (the ingress) wakes once per commit, not once per write.
        The others are plain `async` methods that return after the commit.
Rule 3: writes keep the order they were submitted in (but a `submit_delivered`,
        which commutes with every other write, may go first), and a caller that
        must read what it queued first awaits `settled()`.
Rule 4: a lookup that misses raises `LedgerLookupError` (`ledger/errors.py`):
        `NotFound` or `Conflict`, with the argument it blames; a lost head
        compare-and-swap raises `HeadMoved`; a write the ledger could not make
        raises `LedgerWriteFailed`, and one it refuses to queue (full, closing)
        `WriterOverloaded` or `WriterClosed` from the `submit_*` call itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from broker.core.identity import SessionSpec
from broker.core.timers import TimerSpec

from .dispatch import Dispatched, Limits
from .ingest import Accepted, InboundRecord
from .inspect import LedgerReport
from .items import ItemInfo
from .merge import MergeResult
from .reads import Thread
from .recall import Hit
from .recall_answer import Found, Request
from .timers import TimerInfo
from .turns import ActorStart, OutboxKey, TurnRecord

T_co = TypeVar("T_co", covariant=True)

__all__ = [
    "Accepted",
    "ActorStart",
    "Committing",
    "DeliveryPort",
    "Dispatched",
    "Found",
    "Hit",
    "InboundRecord",
    "IngestPort",
    "ItemInfo",
    "LedgerPort",
    "LedgerReport",
    "Limits",
    "MergeResult",
    "OpsPort",
    "OutboxKey",
    "OutboxRow",
    "ReadPort",
    "Request",
    "SessionSpec",
    "SessionStart",
    "SnapshotPort",
    "Thread",
    "TimerInfo",
    "TimerPort",
    "TurnPort",
    "TurnRecord",
    "WriterStats",
]


class Committing(Protocol[T_co]):
    """A write queued on the ledger (Rule 2); `ledger.jobs.Pending` is one."""

    @property
    def done(self) -> bool: ...

    def get(self) -> T_co:
        """The outcome of a write that is `done`: its result, or its error raised."""
        ...

    async def wait(self) -> None:
        """Return once the write is resolved, committed or failed (without raising)."""
        ...

    async def result(self) -> T_co: ...


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """A reply not yet confirmed by an adapter; `key` pages on from it."""

    out_id: str
    session: str
    frame: str  # the `deliver` frame's JSON
    key: OutboxKey


@dataclass(frozen=True, slots=True)
class SessionStart:
    """What an actor needs when it starts: its session's row and its thread (Rule 1
    of ledger/reads.py), read in one go; `thread` is None for a session with no head."""

    start: ActorStart
    thread: Thread | None


@dataclass(frozen=True, slots=True)
class WriterStats:
    """The writer's figures for `health`: jobs / commits is the group-commit batch size."""

    queued: int
    commits: int
    jobs: int
    pid: int | None  # of the writer process; None when the writer is a thread
    wal_bytes: int  # the write-ahead log's size (0 for a backend without one)


class IngestPort(Protocol):
    """Inbound messages in, identities merged."""

    @property
    def write_failure(self) -> str | None:
        """Why the ledger cannot write now (the storage refuses), or None."""
        ...

    def submit_inbound(
        self, rec: InboundRecord, spec: SessionSpec, now: int
    ) -> Committing[Accepted]:
        """File one message into its session: a queue item, or the first answer for a
        `(channel, msg_id)` seen before (`duplicate`), writing nothing."""
        ...

    async def ingest(
        self, batch: list[tuple[InboundRecord, SessionSpec]], now: int
    ) -> list[Accepted]:
        """`submit_inbound` for each message, waited for together."""
        ...

    async def merge_entities(self, src: str, into: str, now: int) -> MergeResult: ...


class TurnPort(Protocol):
    """What the actors, the registry and the compactor write and read."""

    def submit_mark_running(
        self, turn_id: str, item_ids: list[str], now: int
    ) -> Committing[None]: ...

    def submit_turn(self, rec: TurnRecord) -> Committing[list[ItemInfo]]:
        """Commit a turn on its thread (head compare-and-swap from `rec.parent_id`: a
        lost race raises `HeadMoved` and writes nothing); the worker results it
        queued for parent sessions. A compaction is a turn (`rec.compaction`)."""
        ...

    def submit_orphan(self, rec: TurnRecord) -> Committing[list[ItemInfo]]:
        """Record a turn that lost its head race as failed, off the thread."""
        ...

    def submit_progress(
        self, turn_id: str, session: str, output: str, now: int
    ) -> Committing[None]: ...

    def submit_item_status(
        self, items: list[tuple[str, str, str | None]], now: int
    ) -> Committing[None]:
        """(item id, status, reason) of items dropped, cancelled or handled."""
        ...

    def submit_command_done(
        self,
        item_id: str,
        reason: str,
        reply: tuple[str, str, str, str] | None,  # (out_id, session, channel, frame)
        override: str | bool | None,  # JSON to store, None to clear, False to leave
        now: int,
    ) -> Committing[None]: ...

    def submit_new_thread(self, label: str, previous: str | None, now: int) -> Committing[None]: ...

    async def settled(self) -> None:
        """Return once every write submitted before the call is resolved (Rule 3)."""
        ...

    async def recover_crashed(self, now: int, session: str | None = None) -> list[str]:
        """Record every turn cut off by a crash as aborted (reason `crash`) and queue
        its items again; the ids of those turns."""
        ...

    async def open_items(self, session: str | None = None) -> list[ItemInfo]:
        """Queued and running items in arrival order, of one session or all."""
        ...

    async def session_start(self, label: str) -> SessionStart: ...

    async def dispatch(
        self,
        *,
        parent: str | None,
        parent_turn: str | None,
        tool_call: str | None,
        target: dict[str, Any],
        task: str,
        persona: str | None,
        limits: Limits,
        now: int,
    ) -> Dispatched: ...

    async def sweep_worker_timeouts(self, now: int) -> list[ItemInfo]:
        """End the dispatches past their deadline; the result items queued for parents."""
        ...


class DeliveryPort(Protocol):
    """The replies' outbox, as `broker/deliveries.py` sends and confirms them."""

    def submit_delivered(self, out_ids: list[str], now: int) -> Committing[int]:
        """Mark replies confirmed; joins the next batch rather than making one."""
        ...

    async def pending_outbox(
        self, channel: str, limit: int, after: OutboxKey | None = None
    ) -> list[OutboxRow]:
        """Up to `limit` unconfirmed replies of `channel`, oldest first, after `after`."""
        ...


class ReadPort(Protocol):
    """The reads of operator ops and of the recall tool."""

    async def counts(self) -> dict[str, int]: ...

    async def health_reads(
        self, untouched_since: int
    ) -> tuple[dict[str, int], list[tuple[str, int, int]], str | None]: ...

    async def sessions_list(self, status: str | None, limit: int) -> list[dict[str, Any]]: ...

    async def resolve_session(self, name: str) -> str:
        """The label `name` (a label or an alias) leads to, following merges."""
        ...

    async def session_show(self, name: str, limit: int) -> dict[str, Any]: ...

    async def contact_show(self, channel: str, sender_id: str) -> dict[str, Any]: ...

    async def events_query(
        self,
        *,
        kind: str | None,
        session: str | None,
        turn: str | None,
        text: str | None,
        limit: int,
    ) -> list[dict[str, Any]]: ...

    async def scratchpad_get(self, session: str) -> Any: ...

    async def recall_search(self, query: str, session: str | None, limit: int) -> list[Hit]:
        """Full-text search, best first; a query that cannot be searched: ValueError."""
        ...

    async def recall(self, req: Request) -> Found:
        """One call of the recall tool: search, range, tool_calls or summary."""
        ...


class OpsPort(Protocol):
    """Operator writes, transfer, and the ledger's own state."""

    async def fork(self, turn_id: str, label: str | None, now: int) -> str: ...

    async def scratchpad_merge(self, session: str, patch: dict[str, Any], now: int) -> Any:
        """Apply an RFC 7396 merge patch; the scratchpad after it."""
        ...

    async def export_session(self, label: str, now: int) -> list[dict[str, Any]]:
        """The session's export lines (`brokerctl export`), one snapshot."""
        ...

    async def import_session(
        self, lines: list[bytes], label: str | None, now: int
    ) -> tuple[str, int]:
        """Read an export into a new session: its label and its turn count."""
        ...

    async def check(self, stuck_before: int) -> LedgerReport:
        """What `brokerctl doctor` reports: integrity, schema, turns running and
        replies unconfirmed since before `stuck_before`."""
        ...

    def writer_problems(self) -> list[str]: ...

    @property
    def writer_died(self) -> str | None:
        """Why nothing can be written any more (the writer is gone), or None."""
        ...

    def writer_stats(self) -> WriterStats: ...

    def stop_retrying(self) -> None:
        """At shutdown: a write the storage refuses fails now instead of waiting."""
        ...

    @property
    def backend(self) -> str:
        """The backend's name, as `health` shows it."""
        ...


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


class LedgerPort(
    IngestPort, TurnPort, DeliveryPort, ReadPort, OpsPort, TimerPort, SnapshotPort, Protocol
):
    """Everything the broker shell asks of a ledger."""
