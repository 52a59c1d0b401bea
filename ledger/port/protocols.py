"""The ledger port: what the broker shell asks of a ledger, as typed records.

`ledger/sqlite/store.py` `Ledger` implements it on SQLite; a second backend implements
the same Protocols and passes `tests/conformance/` unchanged.

Records in, records out: every value crossing the port is a record of `ledger/` or
`core/` (or a plain JSON-able value for the ops); no connection, cursor or function
to run on one crosses it. A lookup that misses raises `LedgerLookupError`
(`NotFound` or `Conflict`, with the argument it blames); a lost head compare-and-swap
raises `HeadMoved`; a write the ledger could not make raises `LedgerWriteFailed`, and
one it refuses to queue (full past the wait of `admit`, closing) `WriterOverloaded`
or `WriterClosed`, from `admit` or from the `submit_*` call itself.

A write the shell acts on after its commit (an ack, a reply, the hand-off of an item
to its actor) is a `submit_*` method: it queues the write and returns a `Committing`
at once, which the submitter's own task awaits and then acts on, so no code of the
shell runs in the ledger's writer, many submitters' writes share one commit, and a
task that keeps many in flight (the ingress) wakes once per commit. The others are
plain `async` methods that return after the commit. A submitter that can wait first
awaits `admit()`, which returns at once while the queue of writes has room and
otherwise waits for some, for a bounded time.

Writes keep the order they were submitted in (but a `submit_delivered`, which
commutes with every other write, may go first), and a caller that must read what it
queued first awaits `settled()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from core.bindings import Conversation
from core.identity import SessionSpec
from core.session_state import SessionState
from ledger.port.audit import AuditPort
from ledger.port.committing import Admits, Committing
from ledger.port.erasure import ErasurePort
from ledger.port.features import (
    EmbeddingPort,
    HandoffPort,
    LeasePort,
    RoutePort,
    SnapshotPort,
    ThreadPort,
    TimerPort,
    TitlePort,
)
from ledger.port.names import NamesPort
from ledger.port.proposals import ProposalsPort
from ledger.port.records import (
    Accepted,
    ActorStart,
    BindCommand,
    Carry,
    Dispatched,
    Found,
    Handoff,
    Hit,
    InboundRecord,
    ItemInfo,
    LedgerReport,
    LibraryPort,
    Limits,
    MergeResult,
    Neighbour,
    OutboxKey,
    Reaching,
    Reported,
    Request,
    Thread,
    TimerInfo,
    TurnRecord,
)
from ledger.port.resume import ResumePort
from ledger.port.retention import RetentionPort

__all__ = [
    "Accepted",
    "ActorStart",
    "Admits",
    "BindCommand",
    "Carry",
    "Committing",
    "Conversation",
    "DeliveryPort",
    "Dispatched",
    "EmbeddingPort",
    "Found",
    "Handoff",
    "Hit",
    "InboundRecord",
    "IngestPort",
    "ItemInfo",
    "LedgerPort",
    "LedgerReport",
    "LibraryPort",
    "Limits",
    "MergeResult",
    "Neighbour",
    "OpsPort",
    "OutboxKey",
    "OutboxRow",
    "ReadPort",
    "Reported",
    "Request",
    "RoutePort",
    "SessionSpec",
    "SessionStart",
    "SessionState",
    "SnapshotPort",
    "Thread",
    "ThreadPort",
    "TimerInfo",
    "TimerPort",
    "TitlePort",
    "TurnPort",
    "TurnRecord",
    "WriterStats",
]


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """A reply not yet confirmed by an adapter; `key` pages on from it."""

    out_id: str
    session: str
    frame: str  # the `deliver` frame's JSON
    key: OutboxKey


@dataclass(frozen=True, slots=True)
class SessionStart:
    """What an actor needs when it starts: its session's row and its thread (as
    ledger/reads.py loads it), read in one go; `thread` is None for a session with no head.
    `bridges`: the bridge notes waiting for its next turn (ledger/bridges.py), by id,
    for `SessionContext.add_bridges`; `seed`: the state record a session with no head
    starts from (what a rollover carried over: ledger/state_records.py).
    `known`: the head is the `known_head` the caller named, so the thread was not read
    (`thread` and `seed` are None): the caller holds it already."""

    start: ActorStart
    thread: Thread | None
    bridges: dict[str, str] = field(default_factory=dict)
    seed: SessionState | None = None
    known: bool = False


@dataclass(frozen=True, slots=True)
class WriterStats:
    """The writer's figures for `health`: jobs / commits is the group-commit batch size."""

    queued: int
    commits: int
    jobs: int
    pid: int | None  # of the writer process; None when the writer is a thread
    wal_bytes: int  # the write-ahead log's size (0 for a backend without one)


class IngestPort(Admits, Protocol):
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

    def submit_feedback(
        self,
        channel: str,
        out_id: str,
        msg_id: str,
        sender_id: str,
        reaction: str,
        text: str,
        now: int,
    ) -> Committing[tuple[str, str, bool]]:
        """A reaction to the reply `out_id` of `channel` as a `feedback` event of the turn
        that made it: (session, turn, duplicate); NotFound (field `reply_to`) when no
        turn made that reply, writing nothing."""
        ...


class TurnPort(Admits, Protocol):
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

    def submit_events(
        self,
        turn_id: str,
        session: str,
        parent_id: str | None,
        first_seq: int,
        events: list[tuple[str, dict[str, Any]]],
        now: int,
    ) -> Committing[None]:
        """Write a running turn's events from `first_seq` on, before its turn row
        (ledger/events.py); `parent_id` is the head its `file` events' before-
        hashes are looked up from. Its commit, or crash recovery, attaches them."""
        ...

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

    def submit_new_thread(
        self,
        label: str,
        now: int,
        thread: int | None = None,
        reason: str = "new",
        carry: Carry | None = None,
    ) -> Committing[int | None]:
        """The cut (ledger/threads.py): begin pending thread `thread`, or with None a new
        thread for `reason`; an automatic rollover from `carry`. Idempotent by number:
        the number of the thread begun, None when it was begun already."""
        ...

    async def settled(self) -> None:
        """Return once every write submitted before the call is resolved."""
        ...

    async def recover_crashed(self, now: int, session: str | None = None) -> list[str]:
        """Record every turn cut off by a crash as aborted (reason `crash`) and queue
        its items again; the ids of those turns."""
        ...

    async def open_items(self, session: str | None = None) -> list[ItemInfo]:
        """Queued and running items in arrival order, of one session or all."""
        ...

    async def session_start(self, label: str, known_head: str | None = None) -> SessionStart:
        """The session's row and its thread; with `known_head`, the thread only when
        the head moved from it (a node that ran the session's last turn keeps its
        thread, and a head is never reused: the thread behind a head never changes)."""
        ...

    async def queue_override(self, label: str) -> str | None:
        """The session's `/queue` override (JSON), or None: its row alone, no thread."""
        ...

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
        handoff: Handoff | None = None,
        reaching: Reaching | None = None,
    ) -> Dispatched:
        """`agent_send`: queue `task` on a session or a new worker session, with the
        parent's `handoff` (ledger/dispatch.py); one transaction. With `reaching` (a
        broker tool's call) a target past its turn's reach raises `NotReachable`,
        having written only the refusal's audit row."""
        ...

    async def report_worker_done(self, session: str, result: str, now: int) -> Reported:
        """`worker_done`: end the dispatches whose task `session` took, each with one
        result item for its parent; `Conflict` if none is open (ledger/dispatch.py)."""
        ...

    async def sweep_worker_timeouts(self, now: int) -> list[ItemInfo]:
        """End the dispatches past their deadline; the result items queued for parents."""
        ...


class DeliveryPort(Admits, Protocol):
    """The replies' outbox, as `broker/deliveries.py` sends and confirms them."""

    def submit_delivered(self, out_ids: list[str], now: int) -> Committing[int]:
        """Mark replies confirmed; joins the next batch rather than making one."""
        ...

    async def pending_outbox(
        self, channel: str, limit: int, after: OutboxKey | None = None
    ) -> list[OutboxRow]:
        """Up to `limit` unconfirmed replies of `channel`, oldest first, after `after`."""
        ...

    async def claimable_outbox(
        self,
        channel: str,
        node: str,
        now: int,
        lease_ms: int,
        limit: int,
        after: OutboxKey | None = None,
    ) -> list[OutboxRow]:
        """Up to `limit` pending replies of `channel` that `node` may claim, oldest
        first, after `after` (ledger/outbox_claims.py)."""
        ...

    def submit_claim_outbox(
        self, out_ids: list[str], node: str, now: int, lease_ms: int
    ) -> Committing[list[str]]:
        """Claim replies for `node` to push; the out_ids it won (ledger/outbox_claims.py)."""
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

    async def state_record(self, turn: str | None) -> SessionState:
        """The state record of the thread ending at `turn` (None: an empty thread);
        `NotFound` for an unknown turn (ledger/state_records.py)."""
        ...

    async def session_state(self, session: str) -> dict[str, Any]:
        """`session.state`: the record of the session's current thread, with its
        session section (id, head, model, counts)."""
        ...

    async def console_sessions(self, limit: int, offset: int) -> list[dict[str, Any]]:
        """The web console's page of sessions, the latest changed first (ledger/console.py)."""
        ...

    async def console_session(self, label: str, limit: int) -> dict[str, Any]:
        """A session's latest turns as a tree, its forks and open items; NotFound."""
        ...

    async def console_turn(self, label: str, turn: str) -> dict[str, Any]:
        """One turn of `label`: messages, events, files with diffs; NotFound."""
        ...

    async def workers_list(self, session: str, turn: str | None) -> list[dict[str, Any]]:
        """`workers.list`: the dispatches `session` (a label or an alias) made, of one of
        its turns if `turn`, oldest first; NotFound for an unknown session or turn."""
        ...

    async def recall_search(
        self,
        query: str,
        session: str | None,
        limit: int,
        mode: str = "words",
        query_vector: bytes | None = None,
    ) -> list[Hit]:
        """Search, best first: full text (`mode` words), by meaning (the query's
        `query_vector`) or both fused; a query that cannot be searched: ValueError."""
        ...

    async def recall(self, req: Request) -> Found:
        """One call of the recall tool: search, range, tool_calls or summary."""
        ...

    async def recall_hint_terms(
        self, session: str, terms: tuple[str, ...], own_msg_ids: tuple[str, ...]
    ) -> list[str]:
        """Which of `terms` the session's archived messages hold, other than those of
        the messages `own_msg_ids` (ledger/recall/hint.py)."""
        ...

    async def recall_neighbours(
        self, hits: list[tuple[str, str]], before: int, after: int
    ) -> dict[str, list[Neighbour]]:
        """For each (turn, session) of search hits, the turns before and after it in
        its thread, nearest first (ledger/recall/thread.py)."""
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


class LedgerPort(
    AuditPort,
    IngestPort,
    TurnPort,
    DeliveryPort,
    ReadPort,
    OpsPort,
    TimerPort,
    SnapshotPort,
    RoutePort,
    ThreadPort,
    TitlePort,
    EmbeddingPort,
    LibraryPort,
    ErasurePort,
    NamesPort,
    ResumePort,
    RetentionPort,
    HandoffPort,
    ProposalsPort,
    LeasePort,
    Protocol,
):
    """Everything the broker shell asks of a ledger."""
