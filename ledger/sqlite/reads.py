"""The read side of the SQLite ledger: the port's reads, each one hop to a reader.

Rule 1: a read runs one function of a `ledger/` module on a reader connection,
        in a thread, so the event loop never waits on SQLite; what needs more
        than one query (an actor's start, an export) is read in one hop.
Rule 2: the readers never write: each has its own connection, used by one
        thread at a time.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from core.session_state import SessionState
from ledger import (
    console,
    events,
    inspect,
    queries,
    reads,
    sessions,
    state_reads,
    state_records,
    turns,
    workers,
)
from ledger.bridges import pending_bridges
from ledger.port.protocols import OutboxRow, SessionStart
from ledger.port.records import Found, Hit, ItemInfo, LedgerReport, Neighbour, OutboxKey, Request
from ledger.recall import answer as recall_answer
from ledger.recall import hint as recall_hint
from ledger.recall import search as recall
from ledger.recall import thread as recall_thread

T = TypeVar("T")


class ReaderPool:
    """A fixed set of read connections, each used by one thread at a time."""

    def __init__(self, conns: list[sqlite3.Connection]) -> None:
        self._free = list(conns)
        self._all = list(conns)
        self._slots = anyio.Semaphore(len(conns))

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        async with self._slots:
            conn = self._free.pop()
            try:
                return await anyio.to_thread.run_sync(fn, conn)
            finally:
                self._free.append(conn)

    def close(self) -> None:
        for conn in self._all:
            conn.close()


class SqliteReads:
    """The port's reads (`ledger/port/protocols.py` ReadPort and the reads of TurnPort and
    DeliveryPort) over a `ReaderPool`; `Ledger` adds the writes."""

    def __init__(self, readers: ReaderPool) -> None:
        self.readers = readers

    async def check(self, stuck_before: int) -> LedgerReport:
        """What `brokerctl doctor` reports of the file (ledger/inspect.py)."""
        return await self.readers.run(lambda c: inspect.report(c, stuck_before))

    async def open_items(self, session: str | None = None) -> list[ItemInfo]:
        return await self.readers.run(functools.partial(turns.load_open_items, session=session))

    async def session_start(self, label: str, known_head: str | None = None) -> SessionStart:
        def both(c: sqlite3.Connection) -> SessionStart:
            start = turns.actor_start(c, label)
            if known_head is not None and start.head == known_head:
                return SessionStart(start, None, pending_bridges(c, label), known=True)
            thread = reads.load_thread(c, start.head) if start.head is not None else None
            seed = state_records.thread_seed(c, label) if thread is None else None
            return SessionStart(start, thread, pending_bridges(c, label), seed)

        # One hop to a reader thread, not two: actors start by the thousand.
        return await self.readers.run(both)

    async def queue_override(self, label: str) -> str | None:
        return await self.readers.run(lambda c: queries.queue_override(c, label))

    async def pending_outbox(
        self, channel: str, limit: int, after: OutboxKey | None = None
    ) -> list[OutboxRow]:
        rows = await self.readers.run(
            functools.partial(turns.pending_outbox, channel=channel, limit=limit, after=after)
        )
        return [OutboxRow(*row) for row in rows]

    async def export_session(self, label: str, now: int) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: sessions.export_snapshot(c, label, now))

    async def health_reads(
        self, untouched_since: int
    ) -> tuple[dict[str, int], list[tuple[str, int, int]], str | None]:
        """For `health`: the counts, the sessions with open items untouched since
        `untouched_since` (label, items, oldest), or why the ledger cannot be read."""
        try:
            counts = await self.counts()
            rows = await self.readers.run(
                lambda c: queries.open_items_untouched_since(c, untouched_since)
            )
        except sqlite3.Error as exc:
            return {}, [], f"the ledger cannot be read: {exc}"
        return counts, rows, None

    async def counts(self) -> dict[str, int]:
        return await self.readers.run(queries.counts)

    async def sessions_list(self, status: str | None, limit: int) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: queries.sessions_list(c, status, limit))

    async def console_sessions(self, limit: int, offset: int) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: console.sessions_page(c, limit, offset))

    async def console_session(self, label: str, limit: int) -> dict[str, Any]:
        return await self.readers.run(lambda c: console.session_tree(c, label, limit))

    async def console_turn(self, label: str, turn: str) -> dict[str, Any]:
        return await self.readers.run(lambda c: console.turn_detail(c, label, turn))

    async def workers_list(self, session: str, turn: str | None) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: workers.list_workers(c, session, turn))

    async def resolve_session(self, name: str) -> str:
        return await self.readers.run(lambda c: queries.resolve_for_show(c, name))

    async def session_show(self, name: str, limit: int) -> dict[str, Any]:
        return await self.readers.run(lambda c: queries.session_show(c, name, limit))

    async def contact_show(self, channel: str, sender_id: str) -> dict[str, Any]:
        return await self.readers.run(lambda c: queries.contact_show(c, channel, sender_id))

    async def events_query(
        self,
        *,
        kind: str | None,
        session: str | None,
        turn: str | None,
        text: str | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        return await self.readers.run(
            lambda c: events.query(c, kind=kind, session=session, turn=turn, text=text, limit=limit)
        )

    async def scratchpad_get(self, session: str) -> Any:
        return await self.readers.run(lambda c: events.scratchpad_get(c, session))

    async def state_record(self, turn: str | None) -> SessionState:
        return await self.readers.run(lambda c: state_records.state_at(c, turn))

    async def session_state(self, session: str) -> dict[str, Any]:
        return await self.readers.run(lambda c: state_reads.session_state_json(c, session))

    async def recall_search(self, query: str, session: str | None, limit: int) -> list[Hit]:
        def run(c: sqlite3.Connection) -> list[Hit]:
            label = queries.resolve_for_show(c, session) if session is not None else None
            return recall.search(c, query, label, limit)

        return await self.readers.run(run)

    async def recall(self, req: Request) -> Found:
        return await self.readers.run(lambda c: recall_answer.answer(c, req))

    async def recall_hint_terms(
        self, session: str, terms: tuple[str, ...], own_msg_ids: tuple[str, ...]
    ) -> list[str]:
        return await self.readers.run(
            lambda c: recall_hint.found_terms(c, session, terms, own_msg_ids)
        )

    async def recall_neighbours(
        self, hits: list[tuple[str, str]], before: int, after: int
    ) -> dict[str, list[Neighbour]]:
        def run(c: sqlite3.Connection) -> dict[str, list[Neighbour]]:
            return {t: recall_thread.neighbours(c, t, s, before, after) for t, s in hits}

        return await self.readers.run(run)
