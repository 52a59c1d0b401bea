"""Email adapter benchmark: SMTP → Postfix → Dovecot → adapters.mail → broker (echo) → back.

    .venv/bin/python -m bench.adapters_mail [--messages 200] [--rate 10] [--clients 4]

A person sends over one SMTP connection (aiosmtplib) and reads their mailbox
over IMAP IDLE (the adapter's own ImapSession). Prints, for the adapter and
for the servers alone (an echo account that IDLEs and answers every mail over
SMTP, in this process): the round trip p50/p99 at `--rate` messages per
second, and the closed-loop rate with `--clients` people in lockstep; and the
broker's own round trip through the SDK. Runs as root (Postfix, Dovecot).
"""

from __future__ import annotations

import argparse
import math
import time
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import default
from pathlib import Path

import aiosmtplib
import anyio
from anyio.streams.memory import MemoryObjectSendStream

from adapters.mail_imap import ImapSession
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
from tests.realservers.mailservers import DOMAIN, MailServer, start_mail


class Person:
    """One mailbox: sends over SMTP, reads what arrives over IMAP IDLE."""

    def __init__(self, server: MailServer, name: str, echo: bool = False) -> None:
        self.server = server
        self.address = f"{name}@{DOMAIN}"
        self.echo = echo
        self.smtp = aiosmtplib.SMTP(hostname=server.host, port=server.smtp_port, start_tls=False)
        self.inbox_in, self.inbox_out = anyio.create_memory_object_stream[str](math.inf)

    async def start(self, tg: anyio.abc.TaskGroup) -> Person:
        await self.smtp.connect()
        ready = anyio.Event()
        tg.start_soon(self._read, ready)
        with anyio.fail_after(15):
            await ready.wait()
        return self

    async def _read(self, ready: anyio.Event) -> None:
        session = ImapSession(self.server.host, self.server.imap_port, False, 30)
        box = await session.open(self.address, self.server.accounts[self.address], "INBOX")
        last = box.uidnext - 1
        ready.set()
        while True:
            for uid in await session.wait_new(last, 60):
                raw = await session.fetch(uid)
                last = uid
                if raw is not None:
                    await self._arrived(raw, self.inbox_in)

    async def _arrived(self, raw: bytes, inbox: MemoryObjectSendStream[str]) -> None:
        msg = BytesParser(policy=default).parsebytes(raw)
        part = msg.get_body(("plain",))
        text = str(part.get_content()).replace("\r\n", "\n").strip() if part else ""
        if self.echo:
            await self.mail(str(msg["From"]), text)
            return
        # Mails that reach the broker while a turn runs are answered together
        # (the echo engine answers them line by line in one reply): each one's
        # round trip ends when that reply arrives.
        for line in text.split("\n"):
            inbox.send_nowait(line)

    async def mail(self, to: str, text: str) -> None:
        msg = EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = self.address, to, "bench"
        msg.set_content(text)
        await self.smtp.send_message(msg)

    def conversation(self, peer: str) -> tuple[Send, Receive]:
        # A mail body loses its outer whitespace on the way (the adapter strips
        # it): the reply is matched back to the text as sent.
        sent: dict[str, str] = {}

        async def send(text: str) -> None:
            sent[text.strip()] = text
            await self.mail(peer, text)

        async def receive() -> str:
            with anyio.fail_after(30):
                text = await self.inbox_out.receive()
            return sent.pop(text, text)

        return send, receive


async def measure(server: MailServer, socket: Path, args: argparse.Namespace) -> list[Figures]:
    figures: list[Figures] = []
    async with anyio.create_task_group() as tg:
        await Person(server, "echo", echo=True).start(tg)
        people = [await Person(server, f"c{n}").start(tg) for n in range(args.clients)]
        figures.append(await broker_alone(str(socket), args.rate, args.messages))
        pairs = ((f"echo@{DOMAIN}", "servers alone (echo account)"), (f"bot@{DOMAIN}", "adapter"))
        for peer, label in pairs:
            send, receive = people[0].conversation(peer)
            figures.append(
                await open_loop(
                    f"{label}, {args.rate:g} msg/s", send, receive, args.rate, args.messages
                )
            )
        for peer, label in pairs:
            figures.append(
                await closed_loop(
                    f"{label}, {args.clients} clients closed loop",
                    [p.conversation(peer) for p in people],
                    args.seconds,
                )
            )
        tg.cancel_scope.cancel()
    return figures


def wait_position(path: Path, within: float = 15.0) -> None:
    """Until the adapter stored its first position: mail sent before it is not read."""
    deadline = time.monotonic() + within
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the adapter wrote no {path} within {within}s")
        time.sleep(0.02)


def main() -> None:
    args = arguments(__doc__, clients=4)
    work = workdir("mail")
    accounts = {"bot": "b", "echo": "e", **{f"c{n}": "c" for n in range(args.clients)}}
    (work / "mail-password").write_text("b\n")
    with start_mail(accounts) as server:
        section = {
            "address": f"bot@{DOMAIN}",
            "password_file": str(work / "mail-password"),
            "imap_host": server.host,
            "imap_port": server.imap_port,
            "imap_tls": False,
            "smtp_host": server.host,
            "smtp_port": server.smtp_port,
            "smtp_tls": "none",
            "smtp_auth": False,
        }
        with broker_and_adapter("mail", work, section) as (daemon, adapter):
            wait_position(adapter.state_dir / "positions.json")
            for figure in anyio.run(measure, server, daemon.socket, args):
                print(figure.line())


if __name__ == "__main__":
    main()
