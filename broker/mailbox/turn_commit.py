"""Turn commits: a turn's record written on its thread, its reply sent from the commit.

A reply is expected by Deliveries before its commit is queued, and sent by the turn's
own task once the writer reports the commit (deliveries.py); a write that did not
commit gives the reply up. A turn whose parent is no longer the head (a `/new` or a
merge moved it) is recorded as failed off the thread, never as a silent fork. Worker
results a commit queues for their parents go to their actors at once.

A commit waits for room in the ledger's queue of writes, and when none comes within
its bound it waits again (logged each time), as the turn's start did: a turn that ran
is never given up for a queue that was full for a while. The wait ends when the writer
takes writes again or stops (`WriterClosed`: a shutdown, or storage that stayed
unwritable for `write_fail_exit_s`); a commit the ledger refuses leaves the turn's
items running, and crash recovery records and re-runs them at the next start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from broker.deliveries import Deliveries
from broker.observe import hub
from ledger.port.errors import HeadMoved, LedgerWriteFailed, WriterClosed, WriterOverloaded
from ledger.port.protocols import Committing, TurnPort
from ledger.port.records import ItemInfo, TurnRecord
from plumbing import logs

log = logs.get("broker.mailboxes")
Written = Literal["thread", "orphan", "lost"]


class TurnCommits:
    def __init__(
        self, ledger: TurnPort, deliveries: Deliveries, post: Callable[[ItemInfo], None]
    ) -> None:
        self.ledger = ledger
        self.deliveries = deliveries
        self.post = post
        # Told of each turn written (the titler, broker/titler.py); must not block.
        self.on_written: Callable[[TurnRecord], None] | None = None

    async def commit(self, rec: TurnRecord) -> Written:
        """Commit a turn; where it went."""
        out_id = rec.outbox[0] if rec.outbox is not None else None
        if out_id is not None:
            self.deliveries.expect(out_id)
        written: Written = "lost"
        try:
            written = await self._write_turn(rec)
        finally:
            if out_id is not None and written == "lost":
                self.deliveries.abandon(out_id)
            hub.observer.turn(rec, written)
        if written != "lost" and self.on_written is not None:
            self.on_written(rec)
        return written

    async def _write_turn(self, rec: TurnRecord) -> Written:
        try:
            await self._room(rec)
            self._post_results(rec, await self._write(self.ledger.submit_turn(rec), rec))
            return "thread"
        except HeadMoved:
            log.error(
                "head moved under a running turn; recorded as failed off the thread",
                session=rec.session,
                turn=rec.turn_id,
                parent=rec.parent_id,
            )
        except (LedgerWriteFailed, WriterOverloaded, WriterClosed) as exc:
            log.error(
                "turn commit failed; its items stay running and are recovered at the next start",
                session=rec.session,
                turn=rec.turn_id,
                error=str(exc),
            )
            return "lost"
        try:
            await self._room(rec)
            self._post_results(rec, await self._write(self.ledger.submit_orphan(rec), rec))
            return "orphan"
        except (LedgerWriteFailed, WriterOverloaded, WriterClosed):
            return "lost"

    async def _room(self, rec: TurnRecord) -> None:
        """Room in the ledger's queue of writes, however many bounds it takes."""
        while True:
            try:
                await self.ledger.admit()
                return
            except WriterOverloaded as exc:
                log.warning(
                    "turn commit waits for room in the ledger's queue of writes",
                    session=rec.session,
                    turn=rec.turn_id,
                    error=str(exc),
                )

    async def _write(self, pending: Committing[list[ItemInfo]], rec: TurnRecord) -> list[ItemInfo]:
        results = await pending.result()
        if rec.outbox is not None:
            out_id, channel, frame = rec.outbox
            self.deliveries.deliver(out_id, channel, rec.session, frame)
        return results

    def _post_results(self, rec: TurnRecord, results: list[ItemInfo]) -> None:
        for item in results:
            log.info("worker result queued", session=item.session, worker=rec.session, item=item.id)
            self.post(item)
