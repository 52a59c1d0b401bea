"""Invariants of a quiescent ledger, checked from its tables alone.

Used by the concurrency and crash tests. Every `check_*` returns a list of
violations (human sentences), empty when the invariant holds, so a test can
show the first few instead of stopping at one.

- serial turns: each session's turns form one chain from its head back to a
  root (no fork, no turn off the thread), and along it each turn started at
  or after the previous one completed;
- no overlap: no two turns of a session, on the thread or off it (compactions,
  orphans, turns cut off by a crash), overlap in [started_at, completed_at];
- fate: every queue item is done by exactly one completed/failed turn (and
  points at it), or dropped/cancelled with a reason and in no such turn;
- order: the inputs of a session's completed/failed turns, in chain order and
  messages.seq order, are in increasing queue seq order;
- outbox: every reply row is delivered, and every turn that should have a
  reply has one.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import anyio

RAN = frozenset({"completed", "failed"})


@dataclass(frozen=True, slots=True)
class ItemRow:
    id: str
    seq: int
    session: str
    status: str
    reason: str | None
    turn_id: str | None
    channel: str | None
    msg_id: str | None


@dataclass(frozen=True, slots=True)
class TurnRow:
    id: str
    session: str
    parent: str | None
    type: str
    status: str
    reason: str | None
    started_at: int
    completed_at: int


@dataclass
class LedgerView:
    items: dict[str, ItemRow] = field(default_factory=dict)
    by_msg: dict[tuple[str, str], ItemRow] = field(default_factory=dict)
    turns: dict[str, TurnRow] = field(default_factory=dict)
    inputs: dict[str, list[str]] = field(default_factory=dict)  # turn -> item ids, in order
    heads: dict[str, str | None] = field(default_factory=dict)
    # out_id -> (status, turn id)
    outbox: dict[str, tuple[str, str | None]] = field(default_factory=dict)

    def turns_of(self, session: str) -> list[TurnRow]:
        return [t for t in self.turns.values() if t.session == session]

    def steered_turns(self) -> int:
        """Turns started with one item that ended with more: the rest were steered in."""
        return sum(
            1 for t in self.turns.values() if t.type == "turn" and len(self.inputs[t.id]) > 1
        )

    def status_counts(self) -> Counter[str]:
        return Counter(i.status for i in self.items.values())

    def turn_counts(self) -> Counter[str]:
        return Counter(
            t.status if t.reason is None else f"{t.status}:{t.reason}" for t in self.turns.values()
        )


def load(conn: sqlite3.Connection) -> LedgerView:
    view = LedgerView()
    for row in conn.execute(
        "SELECT q.id, q.seq, q.session_label, q.status, q.reason, q.turn_id, i.channel, i.msg_id"
        " FROM queue_items q LEFT JOIN inbound i ON i.id = q.inbound_id"
    ):
        item = ItemRow(*row)
        view.items[item.id] = item
        if item.channel is not None and item.msg_id is not None:
            view.by_msg[(item.channel, item.msg_id)] = item
    for row in conn.execute(
        "SELECT id, session_label, parent_id, type, status, reason, started_at, completed_at"
        " FROM turns"
    ):
        turn = TurnRow(*row)
        view.turns[turn.id] = turn
        view.inputs[turn.id] = []
    for turn_id, item_id in conn.execute(
        "SELECT turn_id, item_id FROM messages WHERE role = 'user' ORDER BY turn_id, seq"
    ):
        view.inputs.setdefault(turn_id, []).append(item_id)
    for label, head in conn.execute("SELECT label, head_turn_id FROM sessions"):
        view.heads[label] = head
    for out_id, status, turn_id in conn.execute("SELECT out_id, status, turn_id FROM outbox"):
        view.outbox[out_id] = (status, turn_id)
    return view


def open_work(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """(items queued or running, items running, outbox rows pending)."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM queue_items WHERE status IN ('queued', 'running')),"
        " (SELECT count(*) FROM queue_items WHERE status = 'running'),"
        " (SELECT count(*) FROM outbox WHERE status = 'pending')"
    ).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def chain(view: LedgerView, session: str) -> tuple[list[TurnRow], list[str]]:
    """The session's thread, root first, and what is wrong with it."""
    problems: list[str] = []
    ordered: list[TurnRow] = []
    seen: set[str] = set()
    cursor = view.heads.get(session)
    while cursor is not None:
        turn = view.turns.get(cursor)
        if turn is None:
            problems.append(f"{session}: thread names a missing turn {cursor}")
            break
        if cursor in seen:
            problems.append(f"{session}: the thread loops at {cursor}")
            break
        if turn.session != session:
            problems.append(f"{session}: thread turn {cursor} belongs to {turn.session}")
        seen.add(cursor)
        ordered.append(turn)
        cursor = turn.parent
    ordered.reverse()
    off = {t.id for t in view.turns_of(session)} - seen
    if off:
        problems.append(f"{session}: {len(off)} turn(s) off the thread (fork or orphan): {off}")
    children = Counter(t.parent for t in view.turns_of(session) if t.parent is not None)
    problems += [f"{session}: turn {p} has {n} children" for p, n in children.items() if n > 1]
    return ordered, problems


def check_serial_turns(view: LedgerView) -> list[str]:
    """(a) no two turns of a session overlapped; (d) one chain per session, no fork."""
    problems: list[str] = []
    for session in view.heads:
        ordered, wrong = chain(view, session)
        problems += wrong
        for prev, turn in itertools.pairwise(ordered):
            if turn.started_at < prev.completed_at:
                problems.append(
                    f"{session}: turn {turn.id} started at {turn.started_at}, before turn "
                    f"{prev.id} completed at {prev.completed_at}"
                )
    return problems


def check_no_overlap(view: LedgerView) -> list[str]:
    """No two turns of one session ran at once, by the ledger's own times.

    Wider than `check_serial_turns`, which compares neighbours on the thread:
    this takes every turn of the session. Turns may touch (one completes in
    the millisecond the next starts), not overlap.
    """
    problems: list[str] = []
    by_session: dict[str, list[TurnRow]] = {}
    for turn in view.turns.values():
        by_session.setdefault(turn.session, []).append(turn)
    for session, turns in by_session.items():
        turns.sort(key=lambda t: (t.started_at, t.completed_at))
        latest: TurnRow | None = None  # the turn that completes last among those before
        for turn in turns:
            if latest is not None and turn.started_at < latest.completed_at:
                problems.append(
                    f"{session}: {turn.type} turn {turn.id} [{turn.started_at}, "
                    f"{turn.completed_at}] overlaps {latest.type} turn {latest.id} "
                    f"[{latest.started_at}, {latest.completed_at}]"
                )
            if latest is None or turn.completed_at > latest.completed_at:
                latest = turn
    return problems


def check_fates(view: LedgerView, acked: Iterable[tuple[str, str]]) -> list[str]:
    """(b) every acked message is stored, and every item ends in exactly one place."""
    problems = [f"acked {key} is not in the ledger" for key in acked if key not in view.by_msg]
    ran_in: dict[str, list[str]] = {}
    for turn in view.turns.values():
        for item_id in view.inputs.get(turn.id, []):
            item = view.items.get(item_id)
            if item is None or item.session != turn.session:
                problems.append(f"turn {turn.id} has input {item_id} of another session")
            if turn.status in RAN:
                ran_in.setdefault(item_id, []).append(turn.id)
    for item in view.items.values():
        problems += _fate(item, ran_in.get(item.id, []))
    return problems


def _fate(item: ItemRow, ran_in: list[str]) -> list[str]:
    if item.status == "done":
        if len(ran_in) != 1:
            return [f"done item {item.id} ({item.msg_id}) ran in {len(ran_in)} turns"]
        if item.turn_id != ran_in[0]:
            return [f"item {item.id} points at turn {item.turn_id}, ran in {ran_in[0]}"]
        return []
    if item.status in ("dropped", "cancelled"):
        problems = [] if item.reason else [f"{item.status} item {item.id} has no reason"]
        return problems + ([f"{item.status} item {item.id} also ran in {ran_in}"] if ran_in else [])
    return [f"item {item.id} ({item.msg_id}) is still {item.status}"]


def check_arrival_order(view: LedgerView) -> list[str]:
    """(c) a session's messages ran in the order they arrived."""
    problems: list[str] = []
    for session in view.heads:
        ordered, _ = chain(view, session)
        last = -1
        for turn in ordered:
            if turn.status not in RAN:
                continue
            for item_id in view.inputs.get(turn.id, []):
                seq = view.items[item_id].seq if item_id in view.items else -1
                if seq <= last:
                    problems.append(
                        f"{session}: item {item_id} (seq {seq}) in turn {turn.id} ran after "
                        f"seq {last}"
                    )
                last = max(last, seq)
    return problems


def check_outbox(view: LedgerView, no_reply_reasons: frozenset[str] = frozenset()) -> list[str]:
    """(e) every reply is delivered; every turn except those cut off has exactly one."""
    problems = [
        f"outbox {out_id} is {status}"
        for out_id, (status, _) in view.outbox.items()
        if status != "delivered"
    ]
    replies = Counter(turn for _, turn in view.outbox.values() if turn is not None)
    for turn in view.turns.values():
        expected = 0 if turn.reason in no_reply_reasons else 1
        if replies.get(turn.id, 0) != expected:
            problems.append(
                f"turn {turn.id} ({turn.status}:{turn.reason}) has "
                f"{replies.get(turn.id, 0)} outbox rows, expected {expected}"
            )
    return problems


def check_turn_kinds(view: LedgerView, allowed: frozenset[str]) -> list[str]:
    """Every turn's status[:reason] is one the scenario can produce."""
    return [
        f"turn {t.id} of {t.session} is {kind}"
        for t in view.turns.values()
        if (kind := t.status if t.reason is None else f"{t.status}:{t.reason}") not in allowed
    ]


async def wait_quiescent(
    connect: Callable[[], sqlite3.Connection], within_s: float
) -> tuple[int, int, int]:
    """Poll until no item is open and no reply pending; the last counts either way."""
    deadline = time.monotonic() + within_s
    while True:
        conn = connect()
        try:
            counts = open_work(conn)
        finally:
            conn.close()
        if counts == (0, 0, 0) or time.monotonic() > deadline:
            return counts
        await anyio.sleep(0.05)
