"""Adapter connections: inbound frames in, acks out.

An inbound frame is validated and routed before it is handed to the ledger writer,
and acked only after that commit. Acks leave in arrival order and items reach their
actors in commit order: the ingress's one completion task (`run`) takes the filed
messages in submission order from a bounded channel, awaits each one's outcome (the
writer resolves them in that order, waking the task once per commit), then acks it
and hands its item on; nothing of this runs in the ledger writer's task, and what
follows a commit belongs to the ingress, not the connection, so a client that goes
away before its ack costs nothing but the ack.

Backpressure reaches the adapter: when the channel is full, the connection's reader
waits to file the next message and stops reading its socket, and so it does when the
ledger's queue of writes is full (`admit`), for a bounded time, past which the frame
is answered `overloaded`. The bytes of inbound frames handed to the writer and not yet
resolved, over all connections, stay within `max_pending_bytes` (`max_inflight` bounds
only one connection): a frame that would pass it is answered `overloaded` and stores
nothing, and each frame's bytes are given back when its write resolves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from broker.config import Settings
from broker.connection import Connection
from broker.observe import hub
from broker.reactions import submit_reaction
from broker.router import Router
from ledger.port.errors import LedgerWriteFailed, WriterClosed, WriterDied, WriterOverloaded
from ledger.port.protocols import Accepted, Committing, InboundRecord, IngestPort
from plumbing import logs
from plumbing.clock import loop_clock
from plumbing.ids import now_ms
from wire.frames import parse_inbound
from wire.framing import ProtocolError, encode

log = logs.get("broker.ingress")
# Messages filed and not yet answered, over all connections: a few
# writer batches' worth (ledger/writer/group_commit.py takes up to 2,048 jobs a batch).
FILED_BUFFER = 8192


@dataclass
class AdapterState:
    conn: Connection
    inflight: int = 0  # inbound frames waiting for their commit
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Filed:
    """A message handed to the ledger, waiting for its answer."""

    pending: Committing[Accepted]
    state: AdapterState
    size: int  # its frame's bytes
    msg_id: str
    req: str | None
    record: InboundRecord
    at: float  # when it was handed to the writer (the event loop's clock)


class Ingress:
    def __init__(
        self,
        settings: Settings,
        ledger: IngestPort,
        router: Router,
        on_committed: Callable[[Accepted, InboundRecord], None],
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.router = router
        self.on_committed = on_committed
        self._clock = loop_clock()  # anyio's clock (plumbing/clock.py)
        self.adapters: dict[str, AdapterState] = {}
        self.frame_handlers: dict[str, Callable[[Connection, dict[str, Any]], Any]] = {}
        self.accepting = True  # False while the daemon shuts down
        # Why the sessions' runtime cannot take work now (Temporal unreachable), or None.
        self.runtime_failure: Callable[[], str | None] = lambda: None
        # Told of each message acked, so its session's replies go back the way it came.
        self.heard_from: Callable[[Connection, str], None] = lambda _conn, _session: None
        self.pending_bytes = 0  # within `max_pending_bytes`, over all connections
        self._filed, self._to_answer = anyio.create_memory_object_stream[Filed](FILED_BUFFER)
        self._unanswered = 0  # in the channel's buffer (read here without its statistics)
        self._room: anyio.Event | None = None  # a reader waits for the channel to take more
        self._filing: anyio.Event | None = None  # the completion task waits for a message

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Answer filed messages in order, each once its write is resolved."""
        receive = self._to_answer
        task_status.started()
        with self._filed, receive:
            while True:
                if not self._unanswered:
                    # Not `receive()`: it yields once before it looks, a loop turn
                    # whenever the channel is found empty; nor `receive_nowait()`
                    # first, whose WouldBlock is raised and caught at every wait.
                    self._filing = anyio.Event()
                    await self._filing.wait()
                    continue
                filed = receive.receive_nowait()
                self._unanswered -= 1
                if self._room is not None:
                    self._room.set()
                    self._room = None
                pending = filed.pending
                if not pending.done:
                    await pending.wait()  # wakes once for every message of its commit
                self._answer(filed)

    def attach(self, conn: Connection) -> None:
        self.adapters[conn.id] = AdapterState(conn)

    def detach(self, conn: Connection) -> None:
        self.adapters.pop(conn.id, None)

    async def handle(self, conn: Connection, frame: dict[str, Any]) -> None:
        kind = frame["type"]
        if kind == "inbound":
            try:
                await self._inbound(conn, frame)
            except ProtocolError:
                hub.observer.inbound("refused")
                raise
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

    async def _inbound(self, conn: Connection, frame: dict[str, Any]) -> None:
        req = frame.get("req")
        if not self.accepting:
            raise ProtocolError(
                "overloaded", "the broker is shutting down; send it again later", req=req
            )
        msg = parse_inbound(frame, self.settings.max_text_bytes)
        if "reaction" in frame:  # feedback on a reply, not a message (reactions.py)
            await submit_reaction(self.ledger, conn, msg, frame)
            return
        # Room first, then write and file in one step: messages are filed in the
        # order they were written, so their items reach the actors in seq order.
        await self._wait_for_room(req)
        state = self.adapters[conn.id]
        if state.inflight >= self.settings.max_inflight:
            raise ProtocolError(
                "overloaded",
                f"{state.inflight} messages of this connection await their commit; retry later",
                req=req,
            )
        size = conn.frame_bytes
        if self.pending_bytes + size > self.settings.max_pending_bytes:
            raise ProtocolError(
                "overloaded",
                f"the broker holds {self.pending_bytes} bytes of messages pending their commit"
                f" (max_pending_bytes {self.settings.max_pending_bytes}); retry later",
                req=req,
            )
        assert conn.channel is not None
        routed = self.router.route(conn.channel, msg, req, self.settings.queue.person_mode)
        failing = self.ledger.write_failure  # refused now rather than held unacked
        if failing is not None:
            raise ProtocolError("overloaded", f"{failing}; retry later", req=req)
        failing = self.runtime_failure()
        if failing is not None:
            raise ProtocolError("overloaded", f"{failing}; retry later", req=req)
        try:
            pending = self.ledger.submit_inbound(routed.record, routed.spec, now_ms())
        except WriterClosed as exc:
            raise ProtocolError(
                "overloaded", "the broker is shutting down; retry later", req=req
            ) from exc
        # Cannot block: the room was there above, and nothing yielded since. It can be
        # closed: the daemon stops (its writer died) while this frame was routed.
        try:
            self._filed.send_nowait(
                Filed(pending, state, size, msg.msg_id, req, routed.record, self._clock())
            )
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise ProtocolError(
                "overloaded", "the broker is shutting down; retry later", req=req
            ) from exc
        state.inflight += 1
        self.pending_bytes += size
        self._unanswered += 1
        if self._filing is not None:
            self._filing.set()
            self._filing = None

    async def _wait_for_room(self, req: str | None) -> None:
        """Until both the channel of filed messages and the ledger's queue of writes
        take one more; neither check yields when there is room."""
        while True:
            while self._unanswered >= FILED_BUFFER:
                if self._room is None:
                    self._room = anyio.Event()
                await self._room.wait()
            try:
                await self.ledger.admit()
            except WriterOverloaded as exc:
                raise ProtocolError("overloaded", f"{exc}; retry later", req=req) from exc
            except WriterClosed as exc:
                raise ProtocolError(
                    "overloaded", "the broker is shutting down; retry later", req=req
                ) from exc
            if self._unanswered < FILED_BUFFER:  # still, if `admit` had to wait
                return

    def _answer(self, filed: Filed) -> None:
        """Ack a filed message and hand its item on, or say why it was not stored."""
        state, req = filed.state, filed.req
        state.inflight -= 1
        self.pending_bytes -= filed.size
        conn = state.conn
        try:
            acc = filed.pending.get()
        except Exception as exc:
            hub.observer.inbound("refused")
            conn.post(encode(self._refusal(exc, req, filed.msg_id, conn)))
            return
        frame: dict[str, Any] = {
            "type": "ack",
            "msg_id": filed.msg_id,
            "session": acc.session,
            "item": acc.item,
            "duplicate": acc.duplicate,
        }
        if req is not None:
            frame["req"] = req
        conn.post(encode(frame))
        self.heard_from(conn, acc.session)
        observer = hub.observer
        observer.inbound("duplicate" if acc.duplicate else "acked")
        if observer is not hub.SILENT:
            observer.acked(filed.at, self._clock(), acc.session, acc.item)
        if not acc.duplicate:
            self.on_committed(acc, filed.record)

    def _refusal(
        self, exc: BaseException, req: str | None, msg_id: str, conn: Connection
    ) -> dict[str, Any]:
        """The error frame answering an inbound frame whose write failed."""
        if isinstance(exc, WriterDied):
            # The batch may have committed before the process died: say so, so the
            # adapter sends it again (a stored message is answered `duplicate`).
            text = (
                f"the broker lost its ledger writer ({exc}); the message may not have been"
                " stored: send it again"
            )
        elif isinstance(exc, LedgerWriteFailed):
            log.error(
                "ledger write failed",
                conn=conn.id,
                channel=conn.channel,
                msg_id=msg_id,
                req=req,
                error=str(exc),
            )
            text = f"the message was not stored: {exc}"
        else:
            log.error(
                "ingest failed",
                conn=conn.id,
                channel=conn.channel,
                msg_id=msg_id,
                req=req,
                exc_info=exc,
            )
            text = "the message was not stored: internal error (see the broker log)"
        return ProtocolError("internal", text, req=req).frame()
