"""XMPP adapter: chats and group chats (MUC) on an XMPP server ⇄ the broker.

    python -m adapters.xmpp --config /etc/broker/adapters/xmpp.toml

    [xmpp]
    jid = "agent@example.org"
    password_file = "..."      # else $CREDENTIALS_DIRECTORY/xmpp-password
    host = "xmpp.example.org"  # optional: else the JID's domain
    port = 5222
    rooms = ["help@conference.example.org"]
    nick = "agent"             # the bot's nick in rooms
    attachment_probe_s = 2.0   # ask a linked file's server its type and size; 0: never

Runs on asyncio only: slixmpp is an asyncio library.

On each (re)connect the adapter catches up from the server's archive (XEP-0313 MAM),
one archive per DM account and per room, after the last position it stored, and live
messages that arrive meanwhile wait behind the catch-up. A position is the archive id
of a message the broker acked (adapters/position.py); the first start ever begins at
the time the process started.

A reply is confirmed only after the server acked its stanza (XEP-0198 stream
management; a stream without it counts a written stanza as accepted, logged once). A
reply not acked before the stream drops, or answered with a stanza error of type
`wait` (the server's rate limit), is sent again with the same id after a backoff; any
other stanza error is for good: logged, and the reply confirmed as undeliverable. A
reply still streaming `correction_interval_s` after its first delta is shown as a
message (id = the reply's out_id), then corrected (XEP-0308) at most once per
interval, the final text being the last correction; deltas are best effort. An
attachment sent as a bare URL (XEP-0066) gets its type and size from the file's HTTP
server, asked for at most `attachment_probe_s` (adapters/url_probe.py).
"""

from __future__ import annotations

import logging
import math
import random
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from pydantic import Field
from slixmpp import JID, Message
from slixmpp.exceptions import IqError, IqTimeout

from adapters.bridge import Incoming, Target, main
from adapters.position import PositionStore
from adapters.retry import RetryClock, ServerUnavailable, single_error
from adapters.sdk import Backoff, Deliver, Delta
from adapters.settings import AdapterSection, Strict, read_secret, section
from adapters.url_probe import UrlProbe
from adapters.xmpp_session import XmppSession
from adapters.xmpp_stanzas import stanza_id, to_incoming

log = logging.getLogger("adapters.xmpp")

POSITION_FLUSH_S = 0.25  # positions acked are written this often (position.py)


class XmppSection(Strict):
    jid: str = Field(min_length=3)
    password_file: Path | None = None
    host: str | None = None
    port: int = Field(default=5222, gt=0, lt=65536)
    rooms: list[str] = Field(default_factory=list)
    nick: str | None = None
    plaintext: bool = False  # allow a stream without TLS (a loopback test server only)
    mam: bool = True
    correction_interval_s: float = Field(default=1.0, ge=0)
    connect_timeout_s: float = Field(default=15.0, gt=0)
    ack_timeout_s: float = Field(default=30.0, gt=0)
    attachment_probe_s: float = Field(default=2.0, ge=0)


@dataclass
class _Stream:
    """A reply being streamed: its text so far, when it began, when last shown."""

    began: float
    text: str = ""
    shown: float | None = None


class XmppChannel:
    """The XMPP side of the bridge (see the module's rules)."""

    def __init__(self, cfg: XmppSection, common: AdapterSection, password: str) -> None:
        self.cfg = cfg
        self.password = password
        self.jid = JID(cfg.jid).bare
        self.nick = cfg.nick or JID(cfg.jid).user
        self.positions = PositionStore(common.state_dir / "positions.json")
        self.retry = RetryClock(
            common.give_up_s, Backoff(common.retry_initial_s, 2.0, common.retry_max_s, 0.5)
        )
        self.session: XmppSession | None = None
        self._up = anyio.Event()
        self._streams: dict[str, _Stream] = {}  # replies streaming, by out_id
        self._began = datetime.now(UTC)  # a first start catches up from here
        self.probe = UrlProbe(cfg.attachment_probe_s)

    # -- in --------------------------------------------------------------------------

    async def run(self, inbox: MemoryObjectSendStream[Incoming]) -> None:
        async with self.probe:
            await self._run(inbox)

    async def _run(self, inbox: MemoryObjectSendStream[Incoming]) -> None:
        where = f"{self.cfg.host or JID(self.cfg.jid).domain}:{self.cfg.port}"
        while True:
            session = XmppSession(self.cfg.jid, self.password, self.cfg.plaintext)
            # Held from the first stanza on (offline messages come at login) while
            # the catch-up runs; the stream is unbounded as the server's socket is.
            live_in, live_out = anyio.create_memory_object_stream[Message](math.inf)
            session.on_message = live_in.send_nowait
            try:
                with anyio.fail_after(self.cfg.connect_timeout_s):
                    await session.start(self.cfg.host, self.cfg.port)
                    for room in self.cfg.rooms:
                        await session.join(room, self.nick)
                self.retry.succeeded()
                log.info("connected to %s as %s", where, session.client.boundjid.full)
                with single_error():  # a ConnectionError from inside its task group
                    await self._serve(session, live_out, inbox)
                error = "the stream ended"
            except (OSError, TimeoutError, ConnectionError) as exc:
                error = str(exc) or type(exc).__name__
            finally:
                self.session = None
                self._up = anyio.Event()
                live_in.close()
                live_out.close()
                self.positions.flush()
                await session.close()
            delay = self.retry.failed(anyio.current_time(), random.random())
            if delay is None:
                raise ServerUnavailable(f"XMPP server {where}: {error}")
            log.warning("XMPP server %s: %s; retrying in %.1fs", where, error, delay)
            await anyio.sleep(delay)

    async def _serve(
        self,
        session: XmppSession,
        live: MemoryObjectReceiveStream[Message],
        inbox: MemoryObjectSendStream[Incoming],
    ) -> None:
        """Catch up, then pass live messages on, until the stream ends."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch, session, tg.cancel_scope)
            tg.start_soon(self._flush_positions)
            seen: set[str] = set()
            if self.cfg.mam:
                for archive in (self.jid, *self.cfg.rooms):
                    await self._catch_up(session, archive, inbox, seen)
            self.session = session
            self._up.set()
            async for msg in live:
                await self._push(msg, inbox, seen)

    async def _flush_positions(self) -> None:
        while True:
            await anyio.sleep(POSITION_FLUSH_S)
            self.positions.flush()

    async def _watch(self, session: XmppSession, scope: anyio.CancelScope) -> None:
        await session.ended.wait()
        scope.cancel()

    async def _catch_up(
        self,
        session: XmppSession,
        archive: str,
        inbox: MemoryObjectSendStream[Incoming],
        seen: set[str],
    ) -> None:
        key = f"mam:{archive}"
        position = self.positions.get(key)
        if position is None:  # the first start ever: from when this run began
            self.positions.put(key, {"start": self._began.isoformat()})
            self.positions.flush()  # at once: messages from now on must be caught up
            return
        count = 0
        try:
            async for result, archive_id in session.archive(archive, position):
                incoming = self._convert(result, archive_id)
                seen.add(archive_id)
                if incoming is not None:
                    count += 1
                await self._send(incoming, key, archive_id, inbox)
        except IqTimeout as exc:
            raise ConnectionError(f"no answer to the archive query for {archive}") from exc
        except IqError as exc:
            condition = exc.iq["error"]["condition"]
            if condition == "item-not-found":  # the position expired from the archive
                log.warning("position in the archive of %s is gone; from now on", archive)
                self.positions.put(key, {"start": datetime.now(UTC).isoformat()})
            else:  # no MAM there (feature-not-implemented, forbidden, …)
                log.warning("no catch-up from the archive of %s: %s", archive, condition)
        if count:
            log.info("caught up %d messages from the archive of %s", count, archive)

    async def _push(
        self, msg: Message, inbox: MemoryObjectSendStream[Incoming], seen: set[str]
    ) -> None:
        archive = JID(msg["from"]).bare if msg["type"] == "groupchat" else self.jid
        sid = stanza_id(msg, archive)
        if sid is not None and sid in seen:
            return  # already sent from the catch-up
        incoming = self._convert(msg, None)
        key = f"mam:{archive}" if self.cfg.mam and sid else None
        await self._send(incoming, key, sid, inbox)

    def _convert(self, msg: Message, archive_id: str | None) -> Incoming | None:
        try:
            return to_incoming(msg, self.jid, dict.fromkeys(self.cfg.rooms, self.nick), archive_id)
        except (KeyError, ValueError, TypeError) as exc:
            log.warning("malformed message %s skipped: %r", msg["id"] or archive_id, exc)
            return None

    async def _send(
        self,
        incoming: Incoming | None,
        key: str | None,
        archive_id: str | None,
        inbox: MemoryObjectSendStream[Incoming],
    ) -> None:
        if incoming is None:
            # Not stored as a position: messages before it may still await their ack.
            return
        files = incoming.meta.get("attachments")
        if files:
            await self.probe.fill(files)  # bounded, and the message goes on
        if key is not None and archive_id is not None:
            store, value = self.positions.put, {"after": archive_id}
            incoming.on_ack = lambda: store(key, value)
        await inbox.send(incoming)

    # -- out -------------------------------------------------------------------------

    async def delta(self, delta: Delta, target: Target) -> None:
        """A reply still streaming after the interval is shown, then corrected."""
        now = anyio.current_time()
        stream = self._streams.setdefault(delta.out_id, _Stream(began=now))
        stream.text += delta.text
        session = self.session
        if session is None or now - (stream.shown or stream.began) < self.cfg.correction_interval_s:
            return
        replace = delta.out_id if stream.shown else None
        session.send_text(target, stream.text, delta.out_id, replace=replace, wait_ack=False)
        stream.shown = now

    async def deliver(self, reply: Deliver) -> None:
        stream = self._streams.pop(reply.out_id, None)
        streamed = stream is not None and stream.shown is not None
        target = Target(reply.peer_kind, reply.peer_id or "", reply.thread_id)
        if not target.peer_id:
            log.warning("reply %s has no peer to send to; confirmed unsent", reply.out_id)
            return
        attempt = 0
        while True:
            await self._up.wait()  # the run loop gives up (exit 75) if it never comes
            session = self.session
            reason = "the stream is down"
            if session is not None:
                replace = reply.out_id if streamed else None
                sent = session.send_text(target, reply.text, reply.out_id, replace=replace)
                reason = f"not acked within {self.cfg.ack_timeout_s:g}s"
                with anyio.move_on_after(self.cfg.ack_timeout_s):
                    outcome = await sent.wait()
                    if outcome == "accepted":
                        return
                    if outcome == "refused":
                        log.error(
                            "reply %s to %s refused: %s; undeliverable",
                            reply.out_id,
                            target.peer_id,
                            sent.reason,
                        )
                        return
                    reason = sent.reason
            delay = Backoff(initial=0.2, maximum=5.0).delay(attempt, random.random())
            log.warning(
                "reply %s to %s: %s; sending again in %.2fs",
                reply.out_id,
                target.peer_id,
                reason,
                delay,
            )
            await anyio.sleep(delay)
            attempt += 1


def make_channel(raw: dict[str, Any], common: AdapterSection) -> XmppChannel:
    cfg = section(raw, "xmpp", XmppSection)
    password = read_secret("xmpp-password", cfg.password_file)
    assert password is not None  # required=True raises instead
    return XmppChannel(cfg, common, password)


if __name__ == "__main__":
    sys.exit(main(None, "xmpp", make_channel))
