"""The outbox follower's round (broker/cluster_push.py) over a fake ledger: more
replies sent and waiting for their confirmation than a page do not hide the newer
ones behind them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from broker.cluster_push import PAGE, OutboxFollower
from broker.deliveries import Deliveries
from ledger.port.protocols import DeliveryPort, OutboxKey, OutboxRow

pytestmark = pytest.mark.anyio


@dataclass
class Claim:
    ids: list[str]

    async def result(self) -> list[str]:
        return self.ids


@dataclass
class Ledger:
    """Claimable rows in key order; every claim is won."""

    rows: list[OutboxRow]
    reads: int = 0

    async def claimable_outbox(
        self,
        channel: str,
        node: str,
        now: int,
        lease_ms: int,
        limit: int,
        after: OutboxKey | None = None,
    ) -> list[OutboxRow]:
        self.reads += 1
        return [r for r in self.rows if after is None or r.key > after][:limit]

    async def admit(self) -> None:
        pass

    def submit_claim_outbox(self, out_ids: list[str], *_: Any) -> Claim:
        return Claim(out_ids)


@dataclass
class Adapters:
    """This node's adapters of `chat`; `sent` were pushed and are not confirmed yet."""

    sent: set[str]
    pushed: list[str] = field(default_factory=list)

    def channels_here(self) -> list[str]:
        return ["chat"]

    def pushable(self, out_id: str) -> bool:
        return out_id not in self.sent

    def push(self, out_id: str, channel: str, session: str, frame: str) -> None:
        self.pushed.append(out_id)
        self.sent.add(out_id)


def rows(n: int) -> list[OutboxRow]:
    return [OutboxRow(f"o{k:05}", "s", "{}", (k, f"o{k:05}")) for k in range(n)]


def follower(ledger: Ledger, adapters: Adapters) -> OutboxFollower:
    return OutboxFollower(
        cast(DeliveryPort, ledger), cast(Deliveries, adapters), "a", poll_ms=100, lease_ms=5000
    )


async def test_replies_behind_more_than_a_page_of_unconfirmed_ones_are_sent() -> None:
    waiting = rows(PAGE * 2 + 3)
    ledger = Ledger(waiting)
    adapters = Adapters({r.out_id for r in waiting[: PAGE * 2]})
    assert await follower(ledger, adapters).push_round() == 3
    assert adapters.pushed == [r.out_id for r in waiting[PAGE * 2 :]]
    assert ledger.reads == 3  # two pages of its own sent replies, then the new ones


async def test_a_round_sends_one_page_and_stops_where_nothing_is_left() -> None:
    waiting = rows(PAGE + 10)
    ledger = Ledger(waiting)
    adapters = Adapters(set())
    f = follower(ledger, adapters)
    assert await f.push_round() == PAGE  # one page a round: the rest wait a poll
    assert await f.push_round() == 10
    assert await f.push_round() == 0
    assert adapters.pushed == [r.out_id for r in waiting]
