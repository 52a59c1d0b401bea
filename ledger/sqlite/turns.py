"""The SQLite ledger's `TurnPort`: what the actors, the registry and the compactor
write and read.

A turn's writes are `submit_*` jobs on the one writer, in the order they are
submitted, so an actor's mark-running, events and commit land in that order
(`Ledger.settled` waits for all those queued before it). A turn commits only on
the head it was planned from: a lost race raises `HeadMoved` and writes nothing.
An actor's start (its session's row, its thread, its bridge notes) is read in one
hop to a reader, as actors start by the thousand.
"""

from __future__ import annotations

import functools
import sqlite3
from typing import Any

from core.reach import REFUSED
from ledger import dispatch as dispatches
from ledger import queries, reads, state_records, threads, turns
from ledger.bridges import pending_bridges
from ledger.live_events import write_events
from ledger.port.errors import NotReachable
from ledger.port.protocols import SessionStart
from ledger.port.records import (
    Carry,
    Dispatched,
    Handoff,
    ItemInfo,
    Limits,
    Reaching,
    Reported,
    TurnRecord,
)
from ledger.sqlite.connections import Connected
from ledger.writer.jobs import Pending


class SqliteTurns(Connected):
    # -- a turn's writes ----------------------------------------------------

    def submit_mark_running(self, turn_id: str, item_ids: list[str], now: int) -> Pending[None]:
        return self.writer.submit(turns.mark_running, turn_id, item_ids, now)

    def submit_turn(self, rec: TurnRecord) -> Pending[list[ItemInfo]]:
        return self.writer.submit(turns.commit_turn, rec)

    def submit_orphan(self, rec: TurnRecord) -> Pending[list[ItemInfo]]:
        return self.writer.submit(turns.commit_orphan, rec)

    def submit_progress(self, turn_id: str, session: str, output: str, now: int) -> Pending[None]:
        return self.writer.submit(turns.save_progress, turn_id, session, output, now)

    def submit_events(
        self,
        turn_id: str,
        session: str,
        parent_id: str | None,
        first_seq: int,
        events: list[tuple[str, dict[str, Any]]],
        now: int,
    ) -> Pending[None]:
        return self.writer.submit(write_events, turn_id, session, parent_id, first_seq, events, now)

    def submit_item_status(
        self, items: list[tuple[str, str, str | None]], now: int
    ) -> Pending[None]:
        return self.writer.submit(turns.set_item_status, items, now)

    def submit_command_done(
        self,
        item_id: str,
        reason: str,
        reply: tuple[str, str, str, str] | None,
        override: str | bool | None,
        now: int,
    ) -> Pending[None]:
        return self.writer.submit(turns.command_done, item_id, reason, reply, override, now)

    def submit_new_thread(
        self,
        label: str,
        now: int,
        thread: int | None = None,
        reason: str = "new",
        carry: Carry | None = None,
    ) -> Pending[int | None]:
        return self.writer.submit(threads.start_thread, label, thread, reason, carry, now)

    async def recover_crashed(self, now: int, session: str | None = None) -> list[str]:
        return await self.writer.call(turns.recover_crashed, now, session)

    # -- an actor's reads ---------------------------------------------------

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

    # -- workers: dispatch, results, deadlines --------------------------------

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
        done = await self.writer.call(
            dispatches.dispatch,
            parent=parent,
            parent_turn=parent_turn,
            tool_call=tool_call,
            target=target,
            task=task,
            persona=persona,
            limits=limits,
            now=now,
            handoff=handoff,
            reaching=reaching,
        )
        if done is None:  # refused past its turn's reach, and audited (ledger/dispatch.py)
            raise NotReachable(REFUSED, field="target")
        return done

    async def report_worker_done(self, session: str, result: str, now: int) -> Reported:
        return await self.writer.call(dispatches.report, session, result, now)

    async def sweep_worker_timeouts(self, now: int) -> list[ItemInfo]:
        return await self.writer.call(dispatches.sweep_timeouts, now)
