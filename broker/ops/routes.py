"""Operator ops for route bindings (`route.*`): which session a conversation talks to.

`route.bind` sends a conversation's messages to a session of the same person (a
fork, say) from now on, and its replies come back to the conversation as always;
`route.unbind` undoes it; `route.list` shows the bindings. The rules are
`core/bindings.py`'s; the ledger checks them in the binding's transaction.
"""

from __future__ import annotations

from typing import Any

from broker.connection import Connection
from core.bindings import Conversation
from ledger.port.protocols import LedgerPort
from plumbing import logs
from plumbing.ids import now_ms
from wire.frames import CHANNEL_RE, ArgSpec, check_args
from wire.framing import ProtocolError

log = logs.get("broker.ops")

CONVERSATION = (
    ArgSpec("channel", str, True, 32),
    ArgSpec("peer_kind", str, True, 16),
    ArgSpec("peer_id", str, True, 256),
    ArgSpec("thread_id", str, False, 256),
)


class RouteOps:
    def __init__(self, ledger: LedgerPort) -> None:
        self.ledger = ledger
        self.table = {
            "route.bind": self.route_bind,
            "route.unbind": self.route_unbind,
            "route.list": self.route_list,
        }

    async def route_bind(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (*CONVERSATION, ArgSpec("session", str, True)), req)
        conversation = _conversation(a, req)
        label = await self.ledger.route_bind(conversation, a["session"], now_ms())
        log.info("conversation bound", session=label, channel=conversation.channel)
        return {"session": label}

    async def route_unbind(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        conversation = _conversation(check_args(args, CONVERSATION, req), req)
        was = await self.ledger.route_unbind(conversation)
        log.info("conversation unbound", session=was, channel=conversation.channel)
        return {"session": was, "status": "unbound"}

    async def route_list(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (ArgSpec("session", str, False),), req)
        return await self.ledger.route_list(a.get("session"))


def _conversation(a: dict[str, Any], req: str | None) -> Conversation:
    if not CHANNEL_RE.fullmatch(a["channel"]):
        raise ProtocolError(
            "invalid", "channel must match [a-z0-9][a-z0-9_-]{0,31}", field="channel", req=req
        )
    if a["peer_kind"] not in ("dm", "group"):
        raise ProtocolError("invalid", "peer_kind must be dm or group", field="peer_kind", req=req)
    return Conversation(a["channel"], a["peer_kind"], a["peer_id"], a.get("thread_id"))
