"""A person on the XMPP server for the tests: a slixmpp client of their own."""

from __future__ import annotations

from collections.abc import Callable

import anyio
from slixmpp import JID, ClientXMPP, Message

from tests.realservers.servers import Server

WAIT = 10.0


class XmppPerson:
    def __init__(self, server: Server, name: str, plugins: tuple[str, ...] = ()) -> None:
        mechanisms = {"unencrypted_scram": True}
        self.client = ClientXMPP(
            f"{name}@localhost",
            server.accounts[name],
            plugin_config={"feature_mechanisms": mechanisms},
        )
        self.client.enable_starttls = False
        self.client.enable_direct_tls = False
        self.client.enable_plaintext = True
        for plugin in ("xep_0030", "xep_0045", "xep_0308", "xep_0359", *plugins):
            self.client.register_plugin(plugin)
        self.server = server
        self.seen: list[Message] = []
        self._arrived = anyio.Event()
        self._started = anyio.Event()
        self.client.add_event_handler("session_start", lambda _e: self._started.set())
        self.client.add_event_handler("message", self._on_message)

    def _on_message(self, msg: Message) -> None:
        if msg["body"]:
            self.seen.append(msg)
            self._arrived.set()
            self._arrived = anyio.Event()

    async def start(self) -> XmppPerson:
        self.client.connect(self.server.host, self.server.port)
        with anyio.fail_after(WAIT):
            await self._started.wait()
        self.client.send_presence()
        return self

    async def join(self, room: str, nick: str) -> None:
        with anyio.fail_after(WAIT):
            await self.client.plugin["xep_0045"].join_muc_wait(JID(room), nick, maxstanzas=0)

    def say(self, to: str, text: str, *, group: bool = False, thread: str | None = None) -> None:
        msg = self.client.make_message(JID(to), text, mtype="groupchat" if group else "chat")
        if thread:
            msg["thread"] = thread
        msg.send()

    async def expect(self, pred: Callable[[Message], bool], within: float = WAIT) -> Message:
        try:
            with anyio.fail_after(within):
                while True:
                    for msg in self.seen:
                        if pred(msg):
                            return msg
                    await self._arrived.wait()
        except TimeoutError:
            seen = [(str(m["from"]), m["type"], str(m["body"])[:60]) for m in self.seen]
            raise AssertionError(f"no such message within {within}s; seen: {seen}") from None

    async def close(self) -> None:
        with anyio.move_on_after(2, shield=True):
            await self.client.disconnect(wait=1)
