"""Replies across nodes: each node pushes the outbox rows of its own adapters' channels.

On a cluster (several nodes on one ledger) a reply is committed by the node that ran
its turn, but its channel's adapters may be connected to any node. So no node sends a
reply straight from its commit: every node looks in the ledger for pending replies of
the channels whose adapters it holds, claims them (ledger/outbox_claims.py), and sends
the ones it won, so a reply goes out from one node at a time, once a lease. A reply
sent here and not yet confirmed is left alone (the adapter may still confirm it); a
claim that outlives its lease (this node died, or its adapter left without
confirming) is taken over by whichever node holds an adapter of the channel: at least
once, by out_id, as on one node (deliveries.py).

The look is a bounded poll (`poll_ms`), woken early by this node's own commits and
adapter connects, so a local reply waits no poll. A poll rather than PostgreSQL's
LISTEN/NOTIFY: it goes through the ledger port as every read does, misses nothing
across a lost connection or a node's restart, and costs one indexed read per channel
with adapters here and per poll. One page (`PAGE` rows) a channel a round, so what a
full socket refused waits a poll; the page is the first that holds a reply this node
can push, so the replies it sent that wait for their confirmation never hide newer
ones behind them.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from broker.deliveries import Deliveries
from ledger.port.errors import WriterClosed, WriterOverloaded
from ledger.port.protocols import DeliveryPort, OutboxKey, OutboxRow
from plumbing import logs
from plumbing.ids import now_ms

if TYPE_CHECKING:
    from broker.config import Settings

log = logs.get("broker.cluster_push")
PAGE = 500  # replies claimed per channel per round


class OutboxFollower:
    def __init__(
        self,
        ledger: DeliveryPort,
        deliveries: Deliveries,
        node: str,
        *,
        poll_ms: int,
        lease_ms: int,
    ) -> None:
        self.ledger = ledger
        self.deliveries = deliveries
        self.node = node
        self.poll_s = poll_ms / 1000
        self.lease_ms = lease_ms
        self._wake = anyio.Event()

    def wake(self) -> None:
        """A reply committed here, or an adapter came: look now."""
        self._wake.set()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        while True:
            with anyio.move_on_after(self.poll_s):
                await self._wake.wait()
            self._wake = anyio.Event()
            try:
                await self.push_round()
            except (WriterClosed, WriterOverloaded) as exc:
                log.info("outbox round skipped", reason=str(exc))  # the next poll tries again
            except Exception as exc:  # a storage outage: the rows wait in the ledger
                log.warning("outbox round failed", error=str(exc))

    async def push_round(self) -> int:
        """Claim and send what this node's adapters can take; how many were sent."""
        sent = 0
        for channel in self.deliveries.channels_here():
            now = now_ms()
            wanted = await self._page_with_work(channel, now)
            if not wanted:
                continue
            await self.ledger.admit()
            claim = self.ledger.submit_claim_outbox(
                [r.out_id for r in wanted], self.node, now, self.lease_ms
            )
            won = set(await claim.result())
            for row in wanted:
                if row.out_id in won:
                    self.deliveries.push(row.out_id, channel, row.session, row.frame)
                    sent += 1
        return sent

    async def _page_with_work(self, channel: str, now: int) -> list[OutboxRow]:
        """The first page of `channel`'s claimable replies that holds one this
        node can push, or [] once the pages run out."""
        after: OutboxKey | None = None
        while True:
            rows = await self.ledger.claimable_outbox(
                channel, self.node, now, self.lease_ms, PAGE, after
            )
            wanted = [r for r in rows if self.deliveries.pushable(r.out_id)]
            if wanted or len(rows) < PAGE:
                return wanted
            after = rows[-1].key


def follower_for(
    s: Settings, ledger: DeliveryPort, deliveries: Deliveries
) -> OutboxFollower | None:
    """The follower of a node on the Temporal runtime, whose sessions' turns may run on
    any node; None on the local runtime, where a node sends its replies itself."""
    if s.runtime.kind != "temporal":
        return None
    follower = OutboxFollower(
        ledger,
        deliveries,
        s.node_id or f"{socket.gethostname()}:{os.getpid()}",
        poll_ms=s.cluster.outbox_poll_ms,
        lease_ms=s.cluster.claim_lease_ms,
    )
    deliveries.wake_follower = follower.wake
    return follower
