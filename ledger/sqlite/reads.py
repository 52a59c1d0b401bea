"""The SQLite ledger's `ReadPort`: the reads of the operator ops and of the recall
tool, each one function of a `ledger/` module run on a reader in one hop.

These never write, and nothing here holds a connection past its call: what a read
needs of several tables (a session's `show`, recall's neighbours) is read together
on the one reader it was given.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from core.session_state import SessionState
from ledger import console, events, queries, state_reads, state_records, workers
from ledger.port import cipher as driver
from ledger.port.records import Found, Hit, Neighbour, Request, Searched
from ledger.recall import answer as recall_answer
from ledger.recall import hint as recall_hint
from ledger.recall import search as recall
from ledger.recall import thread as recall_thread
from ledger.sqlite.connections import Connected


class SqliteReads(Connected):
    async def counts(self) -> dict[str, int]:
        return await self.readers.run(queries.counts)

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
        except driver.Error as exc:
            return {}, [], f"the ledger cannot be read: {exc}"
        return counts, rows, None

    async def sessions_list(self, status: str | None, limit: int) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: queries.sessions_list(c, status, limit))

    async def console_sessions(self, limit: int, offset: int) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: console.sessions_page(c, limit, offset))

    async def console_session(self, label: str, limit: int) -> dict[str, Any]:
        return await self.readers.run(lambda c: console.session_tree(c, label, limit))

    async def console_turn(self, label: str, turn: str) -> dict[str, Any]:
        return await self.readers.run(lambda c: console.turn_detail(c, label, turn))

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

    async def workers_list(self, session: str, turn: str | None) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: workers.list_workers(c, session, turn))

    async def recall_search(
        self,
        query: str,
        session: str | None,
        limit: int,
        mode: str = "words",
        query_vector: bytes | None = None,
    ) -> list[Hit]:
        def run(c: sqlite3.Connection) -> list[Hit]:
            label = queries.resolve_for_show(c, session) if session is not None else None
            if mode == "words":
                return recall.search(c, query, label, limit)
            req = Request("search", label, limit, query, mode=mode, query_vector=query_vector)
            found = recall_answer.answer(c, req)
            assert isinstance(found, Searched)  # a search answers Searched
            return found.hits

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
