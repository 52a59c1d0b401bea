"""One XMPP stream (a slixmpp client) for adapters.xmpp: start, join, archive, send.

slixmpp calls its event handlers on the asyncio loop this process runs on;
the handlers here only set events and hand messages on, synchronously, in
the order the stream delivered them.

A sent stanza is accepted when the server acks it (XEP-0198); without stream
management a written stanza counts as accepted, and if the stream ends first every
stanza still waiting is reported not accepted, and sent again on the next stream. A
stanza error answering a stanza still waiting settles it instead: type `wait` (a rate
limit) means "again later", any other type refused for good. The server handles a
stream's stanzas in order, so its error comes before the ack that counts the stanza,
and an ack settles only the very stanza object it counts, so a late ack of a bounced
send never confirms the resend that has the same id.

The stream's socket does not wait to fill segments (TCP_NODELAY): the server asks for
an ack after every stanza it sends, so a reply written soon after the small <a/>
answer would otherwise wait for the server's delayed ACK of it (Nagle).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any, Literal

import anyio
from slixmpp import JID, ClientXMPP, Message
from slixmpp.plugins.xep_0198.stanza import RequestAck

from adapters.bridge import Target

log = logging.getLogger("adapters.xmpp")

PLUGINS = (
    "xep_0030",  # service discovery
    "xep_0045",  # multi-user chat
    "xep_0059",  # result set management (MAM paging)
    "xep_0066",  # out-of-band data (attachments)
    "xep_0198",  # stream management (acks)
    "xep_0199",  # ping
    "xep_0203",  # delayed delivery
    "xep_0308",  # last message correction
    "xep_0313",  # message archive management
    "xep_0359",  # stable stanza ids
)
SM_WAIT_S = 2.0  # how long after session start stream management may take to be enabled
MAM_PAGE = 50
STANZA_ERRORS = "{urn:ietf:params:xml:ns:xmpp-stanzas}"


class LoginRefused(ConnectionError):
    """The server refused the account's credentials."""


Outcome = Literal["accepted", "again", "refused"]


class Sent:
    """A stanza waiting for the server's ack."""

    def __init__(self, stanza: Message | None = None) -> None:
        self.stanza = stanza
        self._done = anyio.Event()
        self.outcome: Outcome = "again"
        self.reason = ""

    def settle(self, outcome: Outcome, reason: str = "") -> None:
        if not self._done.is_set():
            self.outcome = outcome
            self.reason = reason
            self._done.set()

    async def wait(self) -> Outcome:
        await self._done.wait()  # bounded by the caller
        return self.outcome


class XmppSession:
    def __init__(self, jid: str, password: str, plaintext: bool) -> None:
        mechanisms = {"unencrypted_scram": plaintext, "unencrypted_plain": plaintext}
        client = ClientXMPP(jid, password, plugin_config={"feature_mechanisms": mechanisms})
        if plaintext:
            client.enable_starttls = False
            client.enable_direct_tls = False
            client.enable_plaintext = True
        for plugin in PLUGINS:
            # The plugin's own requests (every `window` stanzas) are written before
            # the stanza that triggers them, so the ack lags one behind: the
            # sender asks for acks itself, queued behind its message (send_text).
            client.register_plugin(
                plugin, pconfig={"window": 1000} if plugin == "xep_0198" else None
            )
        self.client = client
        self.started = anyio.Event()
        self.ended = anyio.Event()
        self.refused: str | None = None
        self.on_message: Callable[[Message], None] = lambda _msg: None
        self._sm_ready = anyio.Event()
        self._waiting: dict[str, Sent] = {}
        self._ids = itertools.count(1)
        self._warned_no_sm = False
        client.add_event_handler("connected", lambda _e: self._no_delay())
        client.add_event_handler("session_start", lambda _e: self.started.set())
        client.add_event_handler("failed_auth", self._on_refused)
        client.add_event_handler("disconnected", lambda _e: self._end())
        client.add_event_handler("connection_failed", lambda _e: self._end())
        client.add_event_handler("sm_enabled", lambda _e: self._sm_ready.set())
        client.add_event_handler("sm_failed", lambda _e: self._sm_ready.set())
        client.add_event_handler("stanza_acked", self._on_acked)
        client.add_event_handler("message_error", self._on_error)
        client.add_event_handler("message", lambda msg: self.on_message(msg))

    @property
    def stream_management(self) -> bool:
        return bool(self.client.plugin["xep_0198"].enabled_out)

    async def start(self, host: str | None, port: int) -> None:
        """Connect and log in (the caller bounds the wait)."""
        self.client.connect(host, port) if host else self.client.connect()
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_set_when, self.started, scope)
                tg.start_soon(_set_when, self.ended, scope)
        if self.refused is not None:
            raise LoginRefused(f"login refused: {self.refused}")
        if not self.started.is_set():
            raise ConnectionError("the stream ended before the session started")
        with anyio.move_on_after(SM_WAIT_S):
            await self._sm_ready.wait()
        self.client.send_presence()
        # A fence: the server answers stanzas in order, so once the roster comes
        # back it has our presence, and messages to our bare JID reach us.
        await self.client.get_roster()

    async def join(self, room: str, nick: str) -> None:
        await self.client.plugin["xep_0045"].join_muc_wait(JID(room), nick, maxstanzas=0)

    async def archive(
        self, archive: str, position: dict[str, str]
    ) -> AsyncIterator[tuple[Message, str]]:
        """The archived messages after `position` ({"after": id} or {"start": iso time})."""
        own = archive == self.client.boundjid.bare
        options: dict[str, Any] = {"jid": None if own else JID(archive)}
        if "after" in position:
            options["rsm"] = {"after": position["after"], "max": MAM_PAGE}
        else:
            options["start"] = datetime.fromisoformat(position["start"])
            options["rsm"] = {"max": MAM_PAGE}
        async for result in self.client.plugin["xep_0313"].iterate(**options):
            archived = result["mam_result"]
            yield archived["forwarded"]["stanza"], str(archived["id"])

    def send_text(
        self, target: Target, text: str, out_id: str, *, replace: str | None, wait_ack: bool = True
    ) -> Sent:
        """Send a message (or a correction of `replace`); accepted when the server acks it."""
        mtype: Literal["groupchat", "chat"] = "groupchat" if target.peer_kind == "group" else "chat"
        msg = self.client.make_message(mto=JID(target.peer_id), mbody=text, mtype=mtype)
        msg["id"] = out_id if replace is None else f"{out_id}-{next(self._ids)}"
        msg["origin_id"]["id"] = msg["id"]
        if replace is not None:
            msg["replace"]["id"] = replace
        if target.thread_id:
            msg["thread"] = target.thread_id
        sent = Sent(msg)
        if not wait_ack:
            sent.settle("accepted")
        elif self.stream_management:
            self._waiting[str(msg["id"])] = sent
        else:
            if not self._warned_no_sm:
                log.warning("no stream management on this stream: a sent reply counts as accepted")
                self._warned_no_sm = True
            sent.settle("accepted")
        msg.send()
        if wait_ack and self.stream_management:
            self.client.send(RequestAck(self.client))  # queued behind the message
        return sent

    async def close(self) -> None:
        self._end()
        with anyio.move_on_after(2, shield=True), contextlib.suppress(Exception):
            await self.client.disconnect(wait=1)
        self.client.abort()

    def _no_delay(self) -> None:
        """TCP_NODELAY on the stream's socket."""
        transport = self.client.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _on_acked(self, stanza: Any) -> None:
        if stanza is None:
            return
        key = str(stanza["id"])
        sent = self._waiting.get(key)
        if sent is not None and sent.stanza is stanza:
            del self._waiting[key]
            sent.settle("accepted")

    def _on_error(self, msg: Message) -> None:
        """A stanza error settles the stanza it answers: `wait` again later, else refused."""
        error = msg["error"]
        reason = f"{error['type']}/{_condition(error)}"
        if error["text"]:
            reason += f" ({error['text']})"
        sent = self._waiting.pop(str(msg["id"]), None)
        if sent is None:
            log.warning("stanza error for %s, which is not waiting: %s", msg["id"], reason)
            return
        sent.settle("again" if error["type"] == "wait" else "refused", reason)

    def _on_refused(self, stanza: Any) -> None:
        self.refused = str(stanza["condition"] or "not-authorized")
        self._end()

    def _end(self) -> None:
        self.ended.set()
        waiting, self._waiting = self._waiting, {}
        for sent in waiting.values():
            sent.settle("again", "the stream ended")


def _condition(error: Any) -> str:
    """The error's defined condition, also one slixmpp does not list (policy-violation)."""
    for child in error.xml:
        if child.tag.startswith(STANZA_ERRORS) and not child.tag.endswith("}text"):
            return str(child.tag[len(STANZA_ERRORS) :])
    return "undefined-condition"


async def _set_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
