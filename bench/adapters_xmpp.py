"""XMPP adapter benchmark: a real client → Prosody → adapters.xmpp → broker (echo) → back.

    .venv/bin/python -m bench.adapters_xmpp [--messages 200] [--rate 10] [--clients 4]

Prints, for the adapter and for the server alone (a second slixmpp client that
echoes every chat message, on the same server): the round trip p50/p99 at
`--rate` messages per second, and the closed-loop rate with `--clients`
conversations in lockstep; and the broker's own round trip through the SDK.
A reply counts as arrived when a message (or correction) with its whole text
does: the adapter streams deltas as XEP-0308 corrections.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import anyio
from slixmpp import JID, ClientXMPP, Message

from bench.adapters_common import (
    Figures,
    Receive,
    Send,
    arguments,
    broker_alone,
    broker_and_adapter,
    closed_loop,
    open_loop,
    workdir,
)
from tests.realservers.servers import Server, start_prosody


class Person:
    def __init__(self, server: Server, name: str, echo: bool = False) -> None:
        mechanisms = {"unencrypted_scram": True}
        self.client = ClientXMPP(
            f"{name}@localhost",
            server.accounts[name],
            plugin_config={"feature_mechanisms": mechanisms},
        )
        self.client.enable_starttls = False
        self.client.enable_direct_tls = False
        self.client.enable_plaintext = True
        self.client.register_plugin("xep_0308")
        self.server = server
        self.echo = echo
        self.inbox_in, self.inbox_out = anyio.create_memory_object_stream[str](math.inf)
        self.started = anyio.Event()
        self.client.add_event_handler("session_start", lambda _e: self.started.set())
        self.client.add_event_handler("message", self._on_message)

    def _on_message(self, msg: Message) -> None:
        if not msg["body"] or msg["type"] not in ("chat", "normal"):
            return
        if self.echo:
            self.client.make_message(msg["from"], msg["body"], mtype="chat").send()
        else:
            self.inbox_in.send_nowait(str(msg["body"]))

    async def start(self) -> Person:
        self.client.connect(self.server.host, self.server.port)
        with anyio.fail_after(15):
            await self.started.wait()
        self.client.send_presence()
        return self

    def conversation(self, peer: str) -> tuple[Send, Receive]:
        async def send(text: str) -> None:
            self.client.make_message(JID(peer), text, mtype="chat").send()

        async def receive() -> str:
            with anyio.fail_after(30):
                return await self.inbox_out.receive()

        return send, receive


async def measure(server: Server, socket: Path, args: argparse.Namespace) -> list[Figures]:
    figures: list[Figures] = []
    await Person(server, "echo", echo=True).start()
    clients = [await Person(server, f"c{n}").start() for n in range(args.clients)]
    # The three round trips first, on a fresh daemon, then the closed loops.
    figures.append(await broker_alone(str(socket), args.rate, args.messages))
    pairs = (("echo@localhost", "server alone (echo client)"), ("bot@localhost", "adapter"))
    for peer, label in pairs:
        send, receive = clients[0].conversation(peer)
        figures.append(
            await open_loop(
                f"{label}, {args.rate:g} msg/s", send, receive, args.rate, args.messages
            )
        )
    for peer, label in pairs:
        figures.append(
            await closed_loop(
                f"{label}, {args.clients} clients closed loop",
                [c.conversation(peer) for c in clients],
                args.seconds,
            )
        )
    return figures


def main() -> None:
    args = arguments(__doc__, clients=4)
    work = workdir("xmpp")
    accounts = {"bot": "b", "echo": "e", **{f"c{n}": "c" for n in range(args.clients)}}
    (work / "xmpp-password").write_text("b\n")
    with start_prosody(accounts) as server:
        section = {
            "jid": "bot@localhost",
            "password_file": str(work / "xmpp-password"),
            "host": server.host,
            "port": server.port,
            "plaintext": True,
        }
        with broker_and_adapter("xmpp", work, section) as (daemon, _adapter):
            for figure in anyio.run(measure, server, daemon.socket, args):
                print(figure.line())


if __name__ == "__main__":
    main()
