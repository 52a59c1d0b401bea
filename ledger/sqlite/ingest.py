"""The SQLite ledger's `IngestPort`: messages filed into their sessions, identities
merged, reactions recorded.

Each method queues one job on the writer: `ledger/ingest.py` files a message (a
`(channel, msg_id)` seen before gets its first answer back and writes nothing),
`ledger/merge.py` merges two entities, `ledger/live_events.py` records a reaction.
"""

from __future__ import annotations

from core.identity import SessionSpec
from ledger.ingest import ingest_job
from ledger.live_events import add_feedback
from ledger.merge import merge_job
from ledger.port.records import Accepted, InboundRecord, MergeResult
from ledger.sqlite.connections import Connected
from ledger.writer.jobs import Pending


class SqliteIngest(Connected):
    def submit_inbound(self, rec: InboundRecord, spec: SessionSpec, now: int) -> Pending[Accepted]:
        return self.writer.submit(ingest_job, rec, spec, now)

    async def ingest(
        self, batch: list[tuple[InboundRecord, SessionSpec]], now: int
    ) -> list[Accepted]:
        pending = [self.writer.submit(ingest_job, rec, spec, now) for rec, spec in batch]
        return [await p.result() for p in pending]

    async def merge_entities(self, src: str, into: str, now: int) -> MergeResult:
        return await self.writer.call(merge_job, src, into, now)

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
