"""Replies to adapters: `delta` frames (best effort) and `deliver` frames (at least once).

A `deliver` is sent only after the outbox row holding it committed; until an adapter
confirms it with `delivered` it stays pending in the ledger and is sent again, with
the same out_id, when an adapter of its channel connects (or when the adapter it went
to goes away and another of the channel is still connected). A reply whose commit is
on its way (`expect`) is left to its own `deliver` by a connect, since a reader may
see the row before the commit is reported here. Confirmations are recorded by lazy
writer jobs, one in flight at a time, whose outcome `record_confirmations` awaits and
acts on in its own task; until the record commits the confirmed ids are kept here and
not sent again, and after a restart before it commits they are (at least once).

A session's replies go to one adapter of the channel, so its deltas and its deliver
arrive in order on one connection: the one its latest message came from while that one
is connected (an adapter may serve one person only, as a terminal does), else one chosen
by the session label; sending never waits on a client (Connection.post). A connecting
adapter gets the whole pending backlog of its channel, oldest first, a page at a time,
each page only once the socket took the one before, and live replies for it are held
until the backlog is out, so none overtakes an older one; a reply no adapter can take
now is not kept in memory, as the ledger holds it for the next connect. On a cluster
(`wake_follower` set) a reply is sent neither from its commit nor with the backlog at a
connect, since another node may hold an adapter of the channel: this node sends what it
claimed (broker/cluster_push.py), by the same rules.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import orjson

from broker.connection import Connection
from ledger.port.errors import WriterClosed
from ledger.port.protocols import Committing, DeliveryPort, OutboxKey
from plumbing import logs
from plumbing.ids import now_ms
from wire.frames import ArgSpec, check_args
from wire.framing import ProtocolError

log = logs.get("broker.deliveries")
RESEND_PAGE = 1_000  # pending replies read from the ledger at a time
RESEND_FLUSH_BYTES = 1 << 20  # resent bytes after which the resend waits for the socket
PICKS_KEPT = 65_536  # sessions whose adapter choice is remembered, per channel


class Deliveries:
    def __init__(
        self,
        ledger: DeliveryPort,
        *,
        resend_page: int = RESEND_PAGE,
        resend_flush_bytes: int = RESEND_FLUSH_BYTES,
    ) -> None:
        self.ledger = ledger
        # On a cluster, what sends committed replies instead is woken by this
        # (broker/cluster_push.py); None: this node sends them itself.
        self.wake_follower: Callable[[], None] | None = None
        self.resend_page = resend_page
        self.resend_flush_bytes = resend_flush_bytes
        self.adapters: dict[str, list[Connection]] = {}
        # out_id -> (channel, session, frame bytes, the connection it went to)
        self.unconfirmed: dict[str, tuple[str, str, bytes, str | None]] = {}
        # Confirmations wait here for one writer job to record them together.
        self._confirmed: dict[str, None] = {}  # ordered, and a set
        self._confirm_job = False
        self._taking: dict[str, None] | None = None
        self._recording: Committing[int] | None = None  # the job in flight
        self._job_queued: anyio.Event | None = None  # `record_confirmations` waits for one
        # channel -> session -> the adapter `pick` chose; forgotten whenever an
        # adapter of the channel comes or goes, since the choice may change.
        self._picked: dict[str, dict[str, Connection]] = {}
        # channel -> session -> the adapter its latest message came from; kept while
        # others come and go, dropped when that one goes.
        self._heard: dict[str, dict[str, Connection]] = {}
        # out_ids whose outbox row is being committed; `deliver` or `abandon` follows.
        self._committing: set[str] = set()
        # conn id -> live replies held for that adapter until its backlog is out
        self._held: dict[str, dict[str, None]] = {}
        # While a backlog is resent, confirmations whose record committed meanwhile:
        # the page being resent may have been read before that commit.
        self._resends = 0
        self._recorded_meanwhile: set[str] = set()

    def pick(self, channel: str, session: str) -> Connection | None:
        heard = self._heard.get(channel)
        if heard is not None:
            conn = heard.get(session)
            if conn is not None and not conn.closed:
                return conn
        picked = self._picked.get(channel)
        if picked is None:
            picked = self._picked[channel] = {}
        conn = picked.get(session)
        if conn is not None and not conn.closed:
            return conn  # a turn sends a delta and a deliver: hash once
        conns = [c for c in self.adapters.get(channel, ()) if not c.closed]
        if not conns:
            return None
        # Rendezvous hashing: a session keeps its adapter while others come
        # and go; only the sessions of an adapter that leaves move.
        key = session.encode()
        conn = max(conns, key=lambda c: zlib.crc32(key, zlib.crc32(c.id.encode())))
        if len(picked) >= PICKS_KEPT:
            picked.clear()
        picked[session] = conn
        return conn

    def heard_from(self, conn: Connection, session: str) -> None:
        """`session`'s latest message came from `conn`: its replies go there."""
        if conn.channel is None or conn.closed:
            return
        heard = self._heard.setdefault(conn.channel, {})
        if len(heard) >= PICKS_KEPT:
            heard.clear()
        heard[session] = conn

    def delta(self, channel: str, session: str, frame: dict[str, Any]) -> None:
        conn = self.pick(channel, session)
        if conn is not None:
            conn.post(orjson.dumps(frame) + b"\n", droppable=True)

    def expect(self, out_id: str) -> None:
        """The outbox row of `out_id` is about to be committed; `deliver` sends it
        once the commit is reported, or `abandon` gives it up."""
        self._committing.add(out_id)

    def abandon(self, out_id: str) -> None:
        """The commit of `out_id` failed. If its row committed all the same (the
        writer died after COMMIT), the next connect sends it like any pending row."""
        self._committing.discard(out_id)

    def deliver(self, out_id: str, channel: str, session: str, frame_json: str) -> None:
        """Send a committed reply; it stays unconfirmed until `delivered`."""
        self._committing.discard(out_id)
        if self.wake_follower is not None:
            self.wake_follower()  # claimed before it is sent (cluster_push.py)
            return
        self._send(out_id, channel, session, frame_json.encode() + b"\n")

    def _send(self, out_id: str, channel: str, session: str, data: bytes) -> None:
        conn = self.pick(channel, session)
        held = self._held.get(conn.id) if conn is not None else None
        if held is not None:
            held[out_id] = None  # behind that adapter's backlog
            self.unconfirmed[out_id] = (channel, session, data, None)
        else:
            self._post(out_id, channel, session, data, conn)

    def _post(
        self, out_id: str, channel: str, session: str, data: bytes, conn: Connection | None
    ) -> None:
        if conn is not None and conn.post(data):
            self.unconfirmed[out_id] = (channel, session, data, conn.id)
        else:
            # No adapter takes it now: the ledger keeps it for the next connect.
            self.unconfirmed.pop(out_id, None)

    async def adapter_connected(self, conn: Connection) -> None:
        """Send the channel's unconfirmed replies, oldest first, then the held live ones.

        The adapter joins its channel at once, so every reply reported from now
        on is routed with it in view; those that fall to it are held.
        Whatever committed before is in the backlog this reads, or on its way
        through another live adapter, or still committing.
        """
        assert conn.channel is not None
        channel = conn.channel
        if conn.closed:
            return  # gone before this ran: `adapter_gone` is done with it already
        self.adapters.setdefault(channel, []).append(conn)
        self._picked.pop(channel, None)
        if self.wake_follower is not None:
            self.wake_follower()  # the backlog is claimed, not resent whole
            return
        self._held[conn.id] = {}
        self._resends += 1
        resent = 0
        try:
            resent = await self._resend_pages(conn, channel)
        finally:
            self._resends -= 1
            if not self._resends:
                self._recorded_meanwhile.clear()
            # Also when the adapter went away meanwhile: `_send` routes them anew.
            for out_id in self._held.pop(conn.id, ()):
                entry = self.unconfirmed.get(out_id)
                if entry is not None and entry[3] is None:
                    self._send(out_id, *entry[:3])
        if resent:
            log.info("resent unconfirmed replies", conn=conn.id, channel=channel, count=resent)

    async def _resend_pages(self, conn: Connection, channel: str) -> int:
        resent = unflushed = 0
        after: OutboxKey | None = None
        size = self.resend_page
        while True:
            page = await self.ledger.pending_outbox(channel, size, after)
            for row in page:
                out_id, session, frame = row.out_id, row.session, row.frame
                if conn.closed:
                    return resent  # what it was owed goes elsewhere (`adapter_gone`)
                if self._owed_elsewhere(out_id, conn, channel):
                    continue
                data = frame.encode() + b"\n"
                self._post(out_id, channel, session, data, self.pick(channel, session))
                resent += 1
                unflushed += len(data)
                if unflushed >= self.resend_flush_bytes:
                    await conn.flushed()  # the adapter's pace, bounded by the send timeout
                    unflushed = 0
            if len(page) < size:
                return resent
            after = page[-1].key
            await conn.flushed()
            unflushed = 0

    def _owed_elsewhere(self, out_id: str, conn: Connection, channel: str) -> bool:
        """A backlog row the resend must skip: confirmed (its record not yet
        committed, or committed after the page was read), still committing or
        held (its own `deliver` sends it), or on its way through another live
        adapter."""
        if out_id in self._committing or out_id in self._held.get(conn.id, ()):
            return True
        if out_id in self._confirmed or out_id in (self._taking or ()):
            return True
        if out_id in self._recorded_meanwhile:
            return True
        in_flight = self.unconfirmed.get(out_id)
        if in_flight is None or in_flight[3] is None:
            return False
        return any(c.id == in_flight[3] and not c.closed for c in self.adapters[channel])

    def channels_here(self) -> list[str]:
        """The channels with an adapter connected to this node."""
        return [ch for ch, conns in self.adapters.items() if any(not c.closed for c in conns)]

    def pushable(self, out_id: str) -> bool:
        """Whether a claimable row is this node's to send now: not confirmed here,
        not still committing, not in flight to a live adapter (cluster_push.py)."""
        if out_id in self._committing or out_id in self._confirmed:
            return False
        if out_id in (self._taking or ()) or out_id in self._recorded_meanwhile:
            return False
        in_flight = self.unconfirmed.get(out_id)
        if in_flight is None or in_flight[3] is None:
            return True
        conns = self.adapters.get(in_flight[0], ())
        return not any(c.id == in_flight[3] and not c.closed for c in conns)

    def push(self, out_id: str, channel: str, session: str, frame_json: str) -> None:
        """Send a reply this node claimed (cluster_push.py)."""
        self._send(out_id, channel, session, frame_json.encode() + b"\n")

    def adapter_gone(self, conn: Connection) -> None:
        if conn.channel is None:
            return
        conns = self.adapters.get(conn.channel, [])
        if conn in conns:
            conns.remove(conn)
        self._picked.pop(conn.channel, None)
        heard = self._heard.get(conn.channel)
        if heard is not None:
            for session in [s for s, c in heard.items() if c is conn]:
                del heard[session]
        for out_id, (channel, session, data, sent_to) in list(self.unconfirmed.items()):
            if sent_to == conn.id:
                self._send(out_id, channel, session, data)

    async def on_delivered(self, conn: Connection, frame: dict[str, Any]) -> None:
        args = check_args(frame, (ArgSpec("out_id", str, True, 64),), frame.get("req"))
        self.unconfirmed.pop(args["out_id"], None)
        self._confirmed[args["out_id"]] = None
        if self._confirm_job:
            return  # the job already queued records this one too
        try:
            await self.ledger.admit()  # room first (ledger/writer/group_commit.py)
            if not self._confirm_job:  # (none was queued while `admit` waited)
                self._submit_confirm_job()
        except Exception as exc:  # overloaded or closing: it stays pending and is resent
            raise ProtocolError(
                "overloaded",
                "could not record the confirmation; it will be asked again",
                req=frame.get("req"),
            ) from exc

    async def record_confirmations(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Act on each confirmation job's outcome once the writer resolves it."""
        task_status.started()
        while True:
            pending = self._recording
            if pending is None:
                self._job_queued = anyio.Event()
                await self._job_queued.wait()
                continue
            await pending.wait()
            self._recording = None
            try:
                count = pending.get()
            except Exception as exc:
                self._not_recorded(exc)
            else:
                self._recorded(count)

    def _recorded(self, _count: int) -> None:
        if self._resends and self._taking:
            self._recorded_meanwhile.update(self._taking)
        self._taking = None
        self._confirm_job = False
        if self._confirmed:  # arrived after the job took its ids
            try:
                self._submit_confirm_job()
            except WriterClosed as exc:
                # At shutdown the writer has just closed. The rows stay pending
                # and are sent again.
                log.info(
                    "delivery confirmations left unrecorded",
                    ids=len(self._confirmed),
                    reason=str(exc),
                )

    def _not_recorded(self, error: BaseException) -> None:
        # The outbox rows stay pending, so the replies are resent on the next
        # connect; keep the ids for the next job all the same.
        log.warning("could not record delivery confirmations", error=str(error))
        self._confirmed = {**(self._taking or {}), **self._confirmed}
        self._taking = None
        self._confirm_job = False

    def _submit_confirm_job(self) -> None:
        # One job at a time takes every id confirmed so far; ids confirmed while
        # it is queued wait for the next one (see `_recorded`).
        taking = self._confirmed
        # Lazy: nobody waits on it, so it joins the next batch instead of making one.
        pending = self.ledger.submit_delivered(list(taking), now_ms())
        self._confirmed = {}
        self._taking = taking
        self._confirm_job = True
        self._recording = pending
        if self._job_queued is not None:
            self._job_queued.set()
            self._job_queued = None
