"""Reactions: an inbound frame with `reaction` and `reply_to` is a person's feedback on
a reply, not a message for the agent.

It becomes a `feedback` event of the turn that made the reply (ledger/live_events.py)
and is acked only after that commit, with the session and the turn, `item` null (it
queues nothing) and `feedback` true. The connection's reader awaits that commit
itself (reactions are rare), so its ack may pass the acks of messages sent before it.
Sent again with the same `(channel, msg_id)`, it is acked as a `duplicate` and stored
once. A `reply_to` no turn of this channel made is answered `not_found` (field
`reply_to`) and stores nothing; the connection stays open.
"""

from __future__ import annotations

from typing import Any

from broker.connection import Connection
from ledger.port.errors import LedgerLookupError, WriterClosed, WriterOverloaded
from ledger.port.protocols import IngestPort
from plumbing import logs
from plumbing.ids import now_ms
from wire.frames import InboundMessage, parse_reaction
from wire.framing import ProtocolError, encode

log = logs.get("broker.ingress")


async def submit_reaction(
    ledger: IngestPort, conn: Connection, msg: InboundMessage, frame: dict[str, Any]
) -> None:
    req = frame.get("req")
    reaction, reply_to = parse_reaction(frame)
    assert conn.channel is not None
    try:
        await ledger.admit()  # room first (ledger/writer/group_commit.py), then the write
        pending = ledger.submit_feedback(
            conn.channel, reply_to, msg.msg_id, msg.sender_id, reaction, msg.text, now_ms()
        )
    except (WriterOverloaded, WriterClosed) as exc:
        raise ProtocolError("overloaded", "the ledger is saturated; retry later", req=req) from exc

    try:
        session, turn, duplicate = await pending.result()
    except Exception as exc:
        if isinstance(exc, LedgerLookupError):  # no such reply: `not_found`
            error = ProtocolError(exc.code, str(exc), field=exc.field, req=req)  # type: ignore[arg-type]
        else:
            log.error("feedback not stored", conn=conn.id, msg_id=msg.msg_id, error=str(exc))
            error = ProtocolError("internal", "the reaction was not stored", req=req)
        conn.post(encode(error.frame()))
        return
    ack: dict[str, Any] = {
        "type": "ack",
        "msg_id": msg.msg_id,
        "session": session,
        "item": None,
        "turn": turn,
        "feedback": True,
        "duplicate": duplicate,
    }
    if req is not None:
        ack["req"] = req
    conn.post(encode(ack))
    log.info("feedback recorded", session=session, turn=turn, msg_ids=[msg.msg_id])
