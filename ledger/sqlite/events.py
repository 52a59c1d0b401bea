"""The ledger's writes of turn events and reactions (`ledger/live_events.py`), as port
methods: a part of `ledger/sqlite/store.py` `Ledger`, kept apart to keep it small."""

from __future__ import annotations

from typing import Any

from ledger.live_events import add_feedback, set_title, write_events
from ledger.writer.group_commit import LedgerWriter
from ledger.writer.jobs import Pending


class EventWrites:
    writer: LedgerWriter

    async def set_title(self, turn_id: str, title: str, source: str) -> bool:
        return await self.writer.call(set_title, turn_id, title, source)

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

    def submit_feedback(
        self,
        channel: str,
        out_id: str,
        msg_id: str,
        sender_id: str,
        reaction: str,
        text: str,
        now: int,
    ) -> Pending[tuple[str, str, bool]]:
        return self.writer.submit(
            add_feedback, channel, out_id, msg_id, sender_id, reaction, text, now
        )
