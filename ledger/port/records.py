"""The values that cross the ledger port: what the broker shell hands a ledger and
what it gets back. Plain records, no behaviour beyond a derived field."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

import orjson

from core.bindings import Conversation
from core.engine_types import Role, ToolCall
from core.queue_machine import QueueMode
from core.session_state import EMPTY, SessionState, TurnFacts


@dataclass(frozen=True, slots=True)
class BindCommand:
    """A `/fork` or `/switch` from a conversation, and the reply it gets."""

    verb: Literal["fork", "switch"]
    item_id: str
    session: str  # the session the command landed in: the one the conversation talks to
    conversation: Conversation
    target: str | None  # /switch: the label named
    out_id: str
    frame: str  # the reply's `deliver` frame, its text still to write


@dataclass(frozen=True, slots=True)
class MergeCommand:
    """An owner's `/merge yes N` or `/merge no N`, and the reply it gets."""

    accept: bool
    proposal: int
    by: str  # who decides: 'owner:<channel>:<sender>'
    item_id: str
    session: str
    channel: str
    out_id: str
    frame: str  # the reply's `deliver` frame, its text still to write


@dataclass(frozen=True, slots=True)
class Handoff:
    """What a parent hands its worker beside the task."""

    state: str | None  # the parent's session-state record, rendered
    scratchpad_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Reported:
    """`worker_done`'s outcome: the dispatches it ended and their result items."""

    dispatches: tuple[str, ...]
    items: tuple[ItemInfo, ...]


@dataclass(frozen=True, slots=True)
class Limits:
    max_depth: int
    max_children: int
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class Dispatched:
    dispatch: str
    session: str
    item: ItemInfo


class InboundRecord(NamedTuple):  # named tuples here: built once per message, cheaply
    channel: str
    msg_id: str
    sender_id: str
    sender_name: str | None
    peer_kind: str
    peer_id: str
    thread_id: str | None
    text: str
    ts: str | None
    queue_mode: str | None  # the mode the message asked for, if any
    meta: str | None  # JSON text, None when empty
    # The mode its route gives a message that names none, decided once here at
    # ingest (broker/router.py) and stored with the item: the actor does not route.
    route_mode: QueueMode | None = None


class Accepted(NamedTuple):
    msg_id: str
    session: str
    item: str
    duplicate: bool
    seq: int  # arrival order of the queue item; 0 for a duplicate
    entity: str | None
    thread: tuple[int, str] | None = None  # the new thread it starts (number, reason)


@dataclass(frozen=True, slots=True)
class LedgerReport:
    damage: list[str] = field(default_factory=list)
    unreadable: str | None = None  # why the file cannot be read
    schema: int = 0
    latest: int = 0  # the newest schema this broker knows
    running_since: list[tuple[str, int]] = field(default_factory=list)  # (session, since ms)
    unconfirmed: list[tuple[str, int]] = field(default_factory=list)  # (channel, replies)


class LeaseTaking(NamedTuple):
    """The outcome of taking a session's lease (ledger/leases.py): taken, or who holds
    it and until when (ms)."""

    taken: bool
    token: int
    holder: str
    expires_at: int


class ItemInfo(NamedTuple):  # a named tuple: built once per message, cheaply
    id: str
    seq: int
    session: str
    source: str
    mode: str | None
    status: str
    turn_id: str | None
    payload: str | None
    channel: str | None
    msg_id: str | None
    sender_id: str | None
    sender_name: str | None
    peer_kind: str | None
    peer_id: str | None
    thread_id: str | None
    text: str | None
    dispatch_id: str | None = None
    route_mode: QueueMode | None = None  # an inbound message's, decided at ingest (ingest.py)

    @property
    def content(self) -> str:
        if self.text is not None:
            return self.text
        payload = self.payload or ""
        if payload.startswith("{"):  # a structured item (a worker result) carries its text
            try:
                value = orjson.loads(payload)
            except orjson.JSONDecodeError:
                return payload
            if isinstance(value, dict) and isinstance(value.get("text"), str):
                return str(value["text"])
        return payload


@dataclass(frozen=True, slots=True)
class MergeResult:
    canonical: str
    primary: str | None
    aliases: list[tuple[str, str]]  # (alias, session)
    bridges: dict[str, str] = dataclasses.field(default_factory=dict)  # notes for the primary


class StoredTurn(NamedTuple):
    id: str
    messages: list[tuple[Role, str, int | None]]  # role, content, stored token count
    summary: str | None = None  # its summary as a summary-mode context shows it


class Thread(NamedTuple):
    summary: str | None  # of the latest compaction
    turns: list[StoredTurn]  # oldest first
    state: SessionState  # the thread's state record


class Reaching(NamedTuple):  # a named tuple: it goes to the writer process with the job
    """Whose reach a broker tool's call acts with (core/reach.py): its turn's session,
    the tool's name (for the audit row of a refusal) and the contacts a route granted
    reach "any" (ledger/reach.py)."""

    session: str
    tool: str
    wide: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Request:
    """One call of the recall tool, its arguments checked."""

    action: str
    session: str | None  # None: all sessions (search only)
    limit: int
    query: str | None = None
    roles: tuple[str, ...] | None = None
    around_turn: str | None = None
    context_turns: int = 2
    since_ms: int | None = None
    until_ms: int | None = None
    tool_name: str | None = None
    start_turn: int | None = None  # range by turn number within the thread
    end_turn: int | None = None
    before: int = 0  # search: turns shown before and after each hit, within its thread
    after: int = 0
    person: bool = False  # cover every session of the session's entity (recall_scope.py)
    reaching: Reaching | None = None  # a broker tool's call: only what its turn reaches
    mode: str = "words"  # search: words (full text) | meaning (vectors) | both (fused)
    query_vector: bytes | None = None  # meaning, both: the query's float32 unit vector


@dataclass(frozen=True, slots=True)
class Entry:
    """A message, or a tool call (role 'tool', with `tool` and `arguments`)."""

    session: str
    turn: str
    seq: int
    role: str
    at: int
    content: str
    tool: str | None = None
    arguments: str | None = None
    status: str | None = None  # a tool call's ok | error
    turn_status: str = "completed"
    number: int | None = None  # its place in the thread, for a range by number


@dataclass(frozen=True, slots=True)
class Compaction:
    turn: str
    summary: str
    at: int
    turns_summarized: int
    through_turn: str | None
    first_kept_turn: str | None
    trigger: str


# The running totals a session keeps (the sessions.total_* columns, without the prefix).
TOTALS = (
    "events",
    "tool_calls",
    "model_calls",
    "prompt_tokens",
    "completion_tokens",
    "files_modified",
    "errors",
    "errors_resolved",
)


@dataclass(frozen=True, slots=True)
class Summary:
    session: str
    kind: str
    status: str
    created_at: int
    turns: int
    messages: int
    tool_calls: int
    first_at: int | None
    last_at: int | None
    totals: dict[str, int]  # the sessions.total_* columns, without the prefix
    compaction: Compaction | None
    scratchpad: str | None  # the JSON object, verbatim
    state: SessionState = EMPTY  # of the session's current thread
    related: tuple[tuple[str, int], ...] = ()  # the person's other sessions: (label, turns)


@dataclass(frozen=True, slots=True)
class Searched:
    hits: list[Hit]
    some_words: bool  # no message has all the words; these have some of them
    around: dict[str, list[Neighbour]] = field(default_factory=dict)  # by turn
    also: tuple[str, ...] = ()  # the person's other sessions, searched too


Found = Searched | list[Entry] | Summary


@dataclass(frozen=True, slots=True)
class Hit:
    message: int
    session: str
    turn: str
    role: str
    at: int
    snippet: str
    score: float


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A turn next to a hit: `offset` -1 is the turn before it, 1 the turn after."""

    turn: str
    offset: int
    said: str  # its first input message
    answered: str  # its reply (the partial one of an aborted turn)


class Carry(NamedTuple):
    """What an automatic rollover begins from: the compaction turn to write."""

    turn_id: str
    summary: str


@dataclass(frozen=True, slots=True)
class TimerInfo:
    timer: str
    session: str
    text: str
    next_at: int | None
    every_s: float | None
    fired: int

    def as_json(self) -> dict[str, object]:
        return {
            "timer": self.timer,
            "session": self.session,
            "text": self.text,
            "next_at": self.next_at,
            "every_s": self.every_s,
            "fired": self.fired,
        }


@dataclass(frozen=True, slots=True)
class OneTimer:
    """What `fire_one` did: the items it queued, and when the timer is next due
    (None: it is done, cancelled or unknown, and will never fire again)."""

    items: list[ItemInfo]
    next_at: int | None


ItemStatus = Literal["done", "queued", "cancelled"]


@dataclass
class TurnRecord:
    turn_id: str
    session: str
    parent_id: str | None
    type: str
    status: Literal["completed", "aborted", "failed"]
    reason: str | None
    error: str | None
    output: str
    engine: str
    model: str | None
    started_at: int
    completed_at: int
    prompt_tokens: int | None
    completion_tokens: int | None
    inputs: list[ItemInfo]
    item_status: ItemStatus
    item_reason: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    outbox: tuple[str, str, str] | None = None  # (out_id, channel, frame JSON)
    input_tokens: list[int] | None = None  # per input, counted once when first seen
    output_tokens: int | None = None
    compaction: dict[str, object] | None = None  # the compactions row of a compaction turn
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    progress_saved: bool = False  # a turn_progress row may exist for it
    bridges: tuple[str, ...] = ()  # bridge notes its context showed (ledger/bridges.py)
    events_written: int = 0  # events[:events_written] were written while it ran
    title: str | None = None  # None: the mechanical title
    title_source: str | None = None
    outcome: str | None = None
    summary: dict[str, Any] | None = None  # None: made at the commit (core/turn_summary.py)
    metadata: dict[str, Any] | None = None  # free-form, from an engine's result
    system_prompt: str | None = None  # kept on the session row with `model`, when given


OutboxKey = tuple[int, str]  # (created_at, out_id): the order replies are resent in


Route = tuple[str, str | None, str | None, str | None]  # channel, peer_kind, peer_id, thread


@dataclass(frozen=True, slots=True)
class ActorStart:
    """What an actor needs when it starts."""

    head: str | None
    persona: str | None
    override: str | None
    turns: int
    tokens: tuple[int, int]  # running totals, kept by commit_turn
    kind: str
    route: Route | None  # the delivery context of the latest inbound message
    # Decided and not begun (ledger/threads.py): number, reason, the seq of the item
    # that decided it (0: none).
    pending_thread: tuple[int, str, int] | None = None
    scratchpad: str | None = None  # its JSON, as stored; None: never written
    scratchpad_at: int = -1  # when it was last merged (ms): a newer merge seen live wins
    files_known: bool = False  # some turn of the session changed a file
    # A worker's: the routes of the sessions it came from, nearest first, up to the
    # first that is no worker (its own narrowings bound the worker's: registry.py).
    ancestors: tuple[Route | None, ...] = ()


LibraryCall = str


class LibraryPort(Protocol):
    async def library_call(self, call: LibraryCall, args: dict[str, Any], now: int) -> Any:
        """Run one library call and return its JSON answer."""
        ...


def facts_of(rec: TurnRecord) -> TurnFacts:
    """What the record takes of a turn about to be committed."""
    return TurnFacts(
        type=rec.type,
        status=rec.status,
        error=rec.error,
        model=rec.model,
        inputs=tuple([(i.source, i.content) for i in rec.inputs]),
        tool_calls=tuple(rec.tool_calls),
        events=tuple(rec.events),
        prompt_tokens=rec.prompt_tokens or 0,
        completion_tokens=rec.completion_tokens or 0,
    )


ROLES = frozenset({"user", "assistant", "system", "tool"})
