"""Records to drive a ledger through its port, as the broker shell builds them."""

from __future__ import annotations

import itertools

import orjson

from core.queue_machine import QueueMode
from ledger.port.protocols import (
    Accepted,
    InboundRecord,
    ItemInfo,
    LedgerPort,
    SessionSpec,
    TurnRecord,
)
from plumbing.ids import new_id

DM = SessionSpec(None, None)
_clock = itertools.count(1_700_000_000_000, 1000)


def tick() -> int:
    """A fresh, later time for each write, as a real clock would give."""
    return next(_clock)


def inbound(
    msg_id: str,
    sender: str = "alice",
    text: str = "hello",
    channel: str = "chat",
    route_mode: QueueMode | None = None,
) -> InboundRecord:
    return InboundRecord(
        channel, msg_id, sender, sender.title(), "dm", sender, None, text, None, None, None,
        route_mode,
    )  # fmt: skip


async def ingest(port: LedgerPort, rec: InboundRecord) -> Accepted:
    return await port.submit_inbound(rec, DM, tick()).result()


def turn(
    session: str,
    parent: str | None,
    inputs: list[ItemInfo],
    output: str = "a reply",
    *,
    kind: str = "turn",
    outbox_channel: str | None = None,
    compaction: dict[str, object] | None = None,
) -> TurnRecord:
    start = tick()
    turn_id = new_id()
    outbox = None
    if outbox_channel is not None:
        frame = {"type": "deliver", "session": session, "turn": turn_id, "text": output}
        outbox = (new_id(), outbox_channel, orjson.dumps(frame).decode())
    return TurnRecord(
        turn_id=turn_id,
        session=session,
        parent_id=parent,
        type=kind,
        status="completed",
        reason=None,
        error=None,
        output=output,
        engine="echo",
        model=None,
        started_at=start,
        completed_at=tick(),
        prompt_tokens=3,
        completion_tokens=2,
        inputs=inputs,
        item_status="done",
        outbox=outbox,
        compaction=compaction,
    )
