"""Replies to adapters: `delta` frames (best effort) and `deliver` frames (at least once).

Rule 1: a `deliver` is sent only after the outbox row holding it committed;
        until an adapter confirms it with `delivered` it stays pending in the
        ledger and is sent again, with the same out_id, when an adapter of
        its channel connects (or when the adapter it went to goes away and
        another of the channel is still connected). A reply whose commit is
        on its way (`expect`) is left to its own `deliver` by a connect, since
        a reader may see the row before the commit is reported here.
Rule 2: a session's replies go to one adapter of the channel, chosen by the
        session label, so its deltas and its deliver arrive in order on one
        connection. Sending never waits on a client (see Connection.post).
Rule 3: confirmations are recorded by lazy writer jobs (ledger/writer.py
        Rule 6). Until the record commits, the confirmed ids are kept here and
        are not sent again; after a restart before it commits, they are (at
        least once).
"""

from __future__ import annotations

import zlib
from collections import deque
from typing import Any

import orjson

from ledger import turns
from ledger.store import Ledger

from . import logs
from .ids import now_ms
from .protocol import ArgSpec, ProtocolError, check_args
from .server import Connection

log = logs.get("broker.deliveries")
RESEND_BATCH = 10_000
PICKS_KEPT = 65_536  # sessions whose adapter choice is remembered, per channel


class Deliveries:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.adapters: dict[str, list[Connection]] = {}
        # out_id -> (channel, session, frame bytes, the connection it went to)
        self.unconfirmed: dict[str, tuple[str, str, bytes, str | None]] = {}
        # Confirmations wait here for one writer job to record them together.
        self._confirmed: deque[str] = deque()
        self._confirm_job = False
        self._taking: list[str] | None = None
        # channel -> session -> the adapter `pick` chose; forgotten whenever an
        # adapter of the channel comes or goes, since the choice may change.
        self._picked: dict[str, dict[str, Connection]] = {}
        # out_ids whose outbox row is being committed; `deliver` or `abandon` follows.
        self._committing: set[str] = set()

    def pick(self, channel: str, session: str) -> Connection | None:
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
        self._send(out_id, channel, session, frame_json.encode() + b"\n")

    def _send(self, out_id: str, channel: str, session: str, data: bytes) -> None:
        conn = self.pick(channel, session)
        sent_to = conn.id if conn is not None and conn.post(data) else None
        self.unconfirmed[out_id] = (channel, session, data, sent_to)

    async def adapter_connected(self, conn: Connection) -> None:
        """Send the channel's unconfirmed replies, oldest first, then live ones.

        The connection joins the channel only after the backlog is read, and
        the backlog plus whatever committed meanwhile is posted in the same
        step, so a live reply can never overtake an older one.
        """
        assert conn.channel is not None
        channel = conn.channel
        pending = await self.ledger.read(lambda c: turns.pending_outbox(c, channel, RESEND_BATCH))
        self.adapters.setdefault(channel, []).append(conn)
        self._picked.pop(channel, None)
        live = {c.id for c in self.adapters[channel] if not c.closed and c is not conn}
        # Confirmed, but the job recording it has not committed yet: not pending.
        confirmed = {*self._confirmed, *(self._taking or ())}
        seen = set()
        for out_id, session, frame in pending:
            seen.add(out_id)
            if out_id in confirmed or out_id in self._committing:
                continue  # recorded as confirmed, or its `deliver` is still to come
            in_flight = self.unconfirmed.get(out_id)
            if in_flight is not None and in_flight[3] in live:
                continue  # on its way through another live adapter already
            self._send(out_id, channel, session, frame.encode() + b"\n")
        for out_id, (ch, session, data, sent_to) in list(self.unconfirmed.items()):
            if ch == channel and out_id not in seen and sent_to not in live:
                self._send(out_id, channel, session, data)  # committed while we read
        if pending:
            log.info(
                "resent unconfirmed replies", conn=conn.id, channel=channel, count=len(pending)
            )

    def adapter_gone(self, conn: Connection) -> None:
        if conn.channel is None:
            return
        conns = self.adapters.get(conn.channel, [])
        if conn in conns:
            conns.remove(conn)
        self._picked.pop(conn.channel, None)
        for out_id, (channel, session, data, sent_to) in list(self.unconfirmed.items()):
            if sent_to == conn.id:
                self._send(out_id, channel, session, data)

    async def on_delivered(self, conn: Connection, frame: dict[str, Any]) -> None:
        args = check_args(frame, (ArgSpec("out_id", str, True, 64),), frame.get("req"))
        self.unconfirmed.pop(args["out_id"], None)
        self._confirmed.append(args["out_id"])
        if self._confirm_job:
            return  # the job already queued records this one too
        try:
            self._submit_confirm_job()
        except Exception as exc:  # overloaded or closing: it stays pending and is resent
            raise ProtocolError(
                "overloaded",
                "could not record the confirmation; it will be asked again",
                req=frame.get("req"),
            ) from exc

    def _recorded(self, _count: int) -> None:
        self._taking = None
        self._confirm_job = False
        if self._confirmed:  # arrived after the job took its ids
            self._submit_confirm_job()

    def _not_recorded(self, error: BaseException) -> None:
        # The outbox rows stay pending, so the replies are resent on the next
        # connect; keep the ids for the next job all the same.
        log.warning("could not record delivery confirmations", error=str(error))
        self._confirmed.extendleft(reversed(self._taking or []))
        self._taking = None
        self._confirm_job = False

    def _submit_confirm_job(self) -> None:
        # One job at a time takes every id confirmed so far; ids confirmed while
        # it is queued wait for the next one (see `_recorded`).
        taking = list(self._confirmed)
        # Lazy: nobody waits on it, so it joins the next batch instead of making one.
        pending = self.ledger.writer.submit_lazy(turns.mark_delivered, taking, now_ms())
        self._confirmed.clear()
        self._taking = taking
        self._confirm_job = True
        pending.after_commit(self._recorded, self._not_recorded)
