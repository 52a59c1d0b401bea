"""Adapter connections: inbound frames in, acks out.

Rule 1: an inbound frame is validated and routed before it is handed to the
        ledger writer; it is acked only after that commit.
Rule 2: acks of a connection leave in arrival order, written in batches.
Rule 3: what happens after a commit (waking the session's mailbox) is attached
        to the commit itself, not to the connection, so a client that goes
        away before its ack costs nothing but the ack.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ledger.ingest import Accepted
from ledger.store import Ledger
from ledger.writer import (
    LedgerWriteFailed,
    Pending,
    WriterClosed,
    WriterDied,
    WriterOverloaded,
)

from . import logs
from .config import Settings
from .ids import now_ms
from .protocol import ProtocolError, encode, parse_inbound
from .router import Router
from .server import Connection, drain

log = logs.get("broker.ingress")

AckEntry = tuple[str | None, str, Pending[Accepted]]


@dataclass
class AdapterState:
    conn: Connection
    send: MemoryObjectSendStream[AckEntry]
    receive: MemoryObjectReceiveStream[AckEntry]
    inflight: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Ingress:
    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        router: Router,
        on_committed: Callable[[Accepted], None],
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.router = router
        self.on_committed = on_committed
        self.adapters: dict[str, AdapterState] = {}
        self.frame_handlers: dict[str, Callable[[Connection, dict[str, Any]], Any]] = {}
        self.accepting = True  # False while the daemon shuts down

    def attach(self, conn: Connection, tg: anyio.abc.TaskGroup) -> None:
        send, receive = anyio.create_memory_object_stream[AckEntry](self.settings.max_inflight)
        state = AdapterState(conn, send, receive)
        self.adapters[conn.id] = state
        tg.start_soon(self._acker, state)

    def detach(self, conn: Connection) -> None:
        state = self.adapters.pop(conn.id, None)
        if state is not None:
            state.send.close()

    async def handle(self, conn: Connection, frame: dict[str, Any]) -> None:
        kind = frame["type"]
        if kind == "inbound":
            self._inbound(conn, frame)
            return
        handler = self.frame_handlers.get(kind)
        if handler is None:
            raise ProtocolError(
                "unknown_type",
                f"an adapter may not send {kind!r} frames",
                field="type",
                req=frame.get("req"),
            )
        await handler(conn, frame)

    def _inbound(self, conn: Connection, frame: dict[str, Any]) -> None:
        req = frame.get("req")
        if not self.accepting:
            raise ProtocolError(
                "overloaded", "the broker is shutting down; send it again later", req=req
            )
        msg = parse_inbound(frame, self.settings.max_text_bytes)
        state = self.adapters[conn.id]
        if state.inflight >= self.settings.max_inflight:
            raise ProtocolError(
                "overloaded",
                f"{state.inflight} messages of this connection await their commit; retry later",
                req=req,
            )
        assert conn.channel is not None
        routed = self.router.route(conn.channel, msg, req)
        try:
            pending = self.ledger.submit_inbound(routed.record, routed.spec, now_ms())
        except WriterOverloaded as exc:
            raise ProtocolError(
                "overloaded", "the ledger is saturated; retry later", req=req
            ) from exc
        except WriterClosed as exc:
            raise ProtocolError(
                "overloaded", "the broker is shutting down; retry later", req=req
            ) from exc
        pending.after_commit(self._committed)
        state.inflight += 1
        state.send.send_nowait((req, msg.msg_id, pending))

    def _committed(self, accepted: Accepted) -> None:
        if not accepted.duplicate:
            self.on_committed(accepted)

    async def _acker(self, state: AdapterState) -> None:
        async with state.receive:
            async for first in state.receive:
                out = bytearray()
                for req, msg_id, pending in [first, *await drain(state.receive)]:
                    out += encode(await self._answer(req, msg_id, pending, state.conn))
                    state.inflight -= 1
                try:
                    await state.conn.send_raw(bytes(out))
                except (
                    anyio.BrokenResourceError,
                    anyio.ClosedResourceError,
                    TimeoutError,
                    ConnectionError,
                ):
                    return

    async def _answer(
        self, req: str | None, msg_id: str, pending: Pending[Accepted], conn: Connection
    ) -> dict[str, Any]:
        try:
            acc = pending.get() if pending.done else await pending.result()
        except WriterDied as exc:
            # The batch may have committed before the process died: say so, so the
            # adapter sends it again (a stored message is answered `duplicate`).
            return ProtocolError(
                "internal",
                f"the broker lost its ledger writer ({exc}); the message may not have been"
                " stored: send it again",
                req=req,
            ).frame()
        except LedgerWriteFailed as exc:
            log.error(
                "ledger write failed",
                conn=conn.id,
                channel=conn.channel,
                msg_id=msg_id,
                req=req,
                error=str(exc),
            )
            return ProtocolError("internal", f"the message was not stored: {exc}", req=req).frame()
        except Exception:
            log.exception(
                "ingest failed", conn=conn.id, channel=conn.channel, msg_id=msg_id, req=req
            )
            return ProtocolError(
                "internal",
                "the message was not stored: internal error (see the broker log)",
                req=req,
            ).frame()
        frame: dict[str, Any] = {
            "type": "ack",
            "msg_id": msg_id,
            "session": acc.session,
            "item": acc.item,
            "duplicate": acc.duplicate,
        }
        if req is not None:
            frame["req"] = req
        return frame
