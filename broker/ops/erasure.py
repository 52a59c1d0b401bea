"""`entity.erase`: forget a person (ledger/erasure.py does the forgetting).

The ledger marks the erasure first, in one transaction; then, before any row
goes, the sessions it covers stop here: no turn opens in them any more and a
running one is aborted (its commit finds the session erased and keeps nothing),
and the timer wheel looks again, without their cancelled timers. The op answers
only once the rows and their bytes are gone. An erasure a stop cut off is
finished at the next start (`resume`), before the answer it never gave.
"""

from __future__ import annotations

from typing import Any

import anyio

from broker.connection import Connection
from broker.mailbox.registry import Mailboxes
from broker.observe import hub
from broker.timers import Timers
from ledger.port.protocols import LedgerPort
from plumbing import logs
from plumbing.ids import now_ms
from wire.frames import ArgSpec, check_args

log = logs.get("broker.ops")

STOP_GRACE_S = 10.0  # how long an aborted turn of an erased session may take to end


def audit(op: str, target: str, outcome: str, counts: dict[str, int]) -> None:
    """The counts beside the erasure's audit row, in the log. The row itself (the
    entity id, never text) rides in the erasure's first write (broker/ops/audit.py),
    which also replaces the person's other ids in the audit trail by '[erased]'."""
    log.info("audit", op=op, target=target, outcome=outcome, **counts)


class ErasureOps:
    def __init__(
        self, ledger: LedgerPort, mailboxes: Mailboxes | None, timers: Timers | None
    ) -> None:
        self.ledger = ledger
        self.mailboxes = mailboxes
        self.timers = timers
        self.table = {"entity.erase": self.entity_erase}

    async def entity_erase(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args, (ArgSpec("entity", str, True, 64), ArgSpec("confirm", str, True, 64)), req
        )
        entity = a["entity"]
        log.warning("erasing an entity", entity=entity, conn=conn.id)
        counts = await self.ledger.erase_entity(entity, a["confirm"], now_ms(), self.marked)
        audit("entity.erase", entity, "ok", counts)
        hub.observer.erasure("finished", counts)
        return {"entity": entity, **counts}

    async def marked(self, sessions: list[str]) -> None:
        hub.observer.erasure("started", {})
        await self.stop(sessions)

    async def stop(self, sessions: list[str]) -> None:
        """What runs for the erased sessions stops, within STOP_GRACE_S."""
        if self.timers is not None:
            self.timers.changed()
        if self.mailboxes is None:
            return
        actors = [self.mailboxes.actors[s] for s in sessions if s in self.mailboxes.actors]
        for actor in actors:
            actor.drain()
            if actor.turn is not None:
                actor.turn.abort("stop")
        with anyio.move_on_after(STOP_GRACE_S):
            while any(a.turn is not None for a in actors):
                await self.mailboxes.ports.a_turn_ends()

    async def resume(self) -> None:
        """At start: finish an erasure a stop cut off."""
        try:
            done = await self.ledger.resume_erasure()
        except Exception:  # the others are served meanwhile; the next start tries again
            log.exception("an erasure a stop cut off could not be finished")
            return
        if done is not None:
            entity = str(done.pop("entity"))
            counts = {k: int(v) for k, v in done.items()}
            audit("entity.erase", entity, "ok", counts)
            hub.observer.erasure("finished", counts)
