"""IRC adapter: channels and private messages on an IRC server ⇄ the broker.

    python -m adapters.irc --config /etc/broker/adapters/irc.toml

    [irc]
    host = "irc.example.org"
    port = 6667
    tls = false
    # tls_ca_file = "..."  # trust this CA (PEM), not the system's: a self-signed server
    nick = "agent"
    channels = ["#help"]
    password_file = "..."   # optional server password; else $CREDENTIALS_DIRECTORY/irc-password
    max_line_bytes = 400     # text per PRIVMSG line
    rate_per_s = 2.0         # PRIVMSG lines per second after a burst of `burst`
    burst = 5

A private message is `peer_kind: dm` (peer_id the nick); a channel message is
`group` (peer_id the channel) with `meta.mentioned` when it addresses the
bot's nick. IRC has no threads and no history: nothing is caught up after a
restart except what the spool held (adapters/position.py).

A PRIVMSG is spooled before it goes to the broker and leaves the spool after the
broker's ack; on start the spool goes first, in order. Deltas are not sent (IRC cannot
edit): a reply goes out once, whole, split into lines (irc_text.py), and is confirmed
after the server's fence (irc_conn.py). A dropped connection retries the whole reply
after reconnecting, so a line may be seen twice, never lost; a refusal by the server
(no such nick, cannot send to channel) is logged and the reply is confirmed, as it can
never get through. CTCP requests other than ACTION and all NOTICEs are ignored: a bot
never answers a notice.
"""

from __future__ import annotations

import logging
import random
import ssl
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectSendStream
from pydantic import Field

from adapters.bridge import Incoming, Target, main
from adapters.irc_conn import ConnectionDead, IrcConnection, LoginRefused
from adapters.irc_text import Line, is_channel, mentions, message_id, split_text
from adapters.position import Spool
from adapters.retry import RetryClock, ServerUnavailable, TokenBucket, single_error
from adapters.sdk import Backoff, Deliver, Delta
from adapters.settings import AdapterSection, Strict, read_secret, section

log = logging.getLogger("adapters.irc")

LOGIN_ERRORS = frozenset({"464", "465", "463"})  # password mismatch, banned, host refused


class IrcSection(Strict):
    host: str
    port: int = Field(default=6667, gt=0, lt=65536)
    tls: bool = False
    tls_ca_file: Path | None = None
    nick: str = Field(min_length=1, max_length=30)
    username: str | None = None
    realname: str = "agent-broker"
    channels: list[str] = Field(default_factory=list)
    password_file: Path | None = None
    max_line_bytes: int = Field(default=400, ge=16, le=480)
    rate_per_s: float = Field(default=2.0, gt=0)
    burst: int = Field(default=5, ge=1)
    ping_interval_s: float = Field(default=60.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    send_timeout_s: float = Field(default=60.0, gt=0)


class IrcChannel:
    """The IRC side of the bridge (see the module's rules)."""

    def __init__(self, cfg: IrcSection, common: AdapterSection, password: str | None) -> None:
        self.cfg = cfg
        self.password = password
        self.spool = Spool(common.state_dir / "spool")
        self.retry = RetryClock(
            common.give_up_s, Backoff(common.retry_initial_s, 2.0, common.retry_max_s, 0.5)
        )
        self.conn: IrcConnection | None = None
        self._up = anyio.Event()
        self._inbox: MemoryObjectSendStream[Incoming] | None = None

    # -- in --------------------------------------------------------------------------

    async def run(self, inbox: MemoryObjectSendStream[Incoming]) -> None:
        try:
            await self._run(inbox)
        finally:
            self.spool.close()

    async def _run(self, inbox: MemoryObjectSendStream[Incoming]) -> None:
        self._inbox = inbox
        for number, record in self.spool.pending():  # the spool goes first, in order
            await inbox.send(self._incoming(record, number))
        where = f"{self.cfg.host}:{self.cfg.port}"
        while True:
            try:
                await self._session()
                error = "the connection ended"
            except LoginRefused as exc:
                error = f"login refused: {exc}"
            except (OSError, ConnectionDead, anyio.BrokenResourceError, TimeoutError) as exc:
                error = str(exc) or type(exc).__name__
            delay = self.retry.failed(anyio.current_time(), random.random())
            if delay is None:
                raise ServerUnavailable(f"IRC server {where}: {error}")
            log.warning("IRC server %s: %s; retrying in %.1fs", where, error, delay)
            await anyio.sleep(delay)

    async def _session(self) -> None:
        cfg = self.cfg
        with anyio.fail_after(cfg.connect_timeout_s):
            stream: anyio.abc.ByteStream
            if cfg.tls:
                context = ssl.create_default_context(
                    cafile=str(cfg.tls_ca_file) if cfg.tls_ca_file else None
                )
                stream = await anyio.connect_tcp(cfg.host, cfg.port, tls=True, ssl_context=context)
            else:
                stream = await anyio.connect_tcp(cfg.host, cfg.port)
        conn = IrcConnection(stream, TokenBucket(cfg.rate_per_s, cfg.burst), self._on_line)
        try:
            with single_error():
                async with anyio.create_task_group() as tg:
                    tg.start_soon(conn.read_forever, cfg.ping_interval_s)
                    with anyio.fail_after(cfg.connect_timeout_s):
                        await self._register(conn)
                        await conn.registered.wait()
                    self.conn = conn
                    self._up.set()
                    self.retry.succeeded()
                    log.info("connected to %s:%d as %s", cfg.host, cfg.port, conn.nick)
                    for name in cfg.channels:
                        await conn.send(f"JOIN {name}")
        finally:
            self.conn = None
            self._up = anyio.Event()
            await conn.aclose()

    async def _register(self, conn: IrcConnection) -> None:
        if self.password:
            await conn.send(f"PASS :{self.password}")
        await conn.send("CAP LS 302")
        await conn.send(f"NICK {self.cfg.nick}")
        await conn.send(f"USER {self.cfg.username or self.cfg.nick} 0 * :{self.cfg.realname}")

    async def _on_line(self, conn: IrcConnection, line: Line) -> None:
        command = line.command
        if command == "CAP" and len(line.params) >= 3:
            await self._on_cap(conn, line.params[1], line.params[-1].split())
        elif command == "001":
            conn.nick = line.params[0] if line.params else self.cfg.nick
            conn.registered.set()
        elif command == "433" and not conn.registered.is_set():
            taken = line.params[1] if len(line.params) > 1 else self.cfg.nick
            await conn.send(f"NICK {taken}_")
        elif command in LOGIN_ERRORS or (command == "ERROR" and not conn.registered.is_set()):
            raise LoginRefused(" ".join(line.params) or command)
        elif command == "ERROR":
            raise ConnectionDead("the server closed the link: " + " ".join(line.params))
        elif command == "PRIVMSG":
            await self._on_privmsg(conn, line)

    async def _on_cap(self, conn: IrcConnection, verb: str, caps: list[str]) -> None:
        names = {cap.split("=", 1)[0] for cap in caps}
        if verb == "LS" and "server-time" in names:
            await conn.send("CAP REQ :server-time")
        elif verb in ("LS", "ACK", "NAK"):
            await conn.send("CAP END")

    async def _on_privmsg(self, conn: IrcConnection, line: Line) -> None:
        if len(line.params) < 2 or not line.nick:
            log.warning("malformed PRIVMSG skipped: %s %r", line.source, line.params)
            return
        target, text = line.params[0], line.params[1]
        meta: dict[str, Any] = {"hostmask": str(line.source)}
        if text.startswith("\x01"):
            body = text.strip("\x01")
            if not body.startswith("ACTION "):
                return  # CTCP other than ACTION: ignored
            text, meta["action"] = body[len("ACTION ") :], True
        when = line.tags.get("time") or datetime.now(UTC).isoformat(timespec="microseconds")
        record: dict[str, Any] = {
            "msg_id": message_id(when, line.nick, target, text),
            "sender_id": line.nick,
            "sender_name": line.nick,
            "text": text,
            "peer_kind": "dm",
            "meta": meta,
        }
        if is_channel(target):
            record.update(peer_kind="group", peer_id=target)
            meta["mentioned"] = mentions(text, conn.nick)
        if "time" in line.tags:
            record["ts"] = line.tags["time"]
        number = self.spool.add(record)
        if self._inbox is not None:
            await self._inbox.send(self._incoming(record, number))

    def _incoming(self, record: dict[str, Any], number: int) -> Incoming:
        return Incoming(
            msg_id=str(record["msg_id"]),
            sender_id=str(record["sender_id"]),
            text=str(record["text"]),
            peer_kind=str(record.get("peer_kind", "dm")),
            peer_id=record.get("peer_id"),
            sender_name=record.get("sender_name"),
            meta=dict(record.get("meta") or {}),
            ts=record.get("ts"),
            on_ack=lambda: self.spool.remove(number),
        )

    # -- out -------------------------------------------------------------------------

    async def delta(self, delta: Delta, target: Target) -> None:
        """IRC cannot edit a line, so only the final reply is sent."""

    async def deliver(self, reply: Deliver) -> None:
        target = reply.peer_id
        if not target:
            log.warning("reply %s has no peer to send to; confirmed unsent", reply.out_id)
            return
        bodies = split_text(reply.text, self.cfg.max_line_bytes)
        attempt = 0
        while True:
            await self._up.wait()  # the run loop gives up (exit 75) if it never comes
            conn = self.conn
            if conn is not None:
                try:
                    with anyio.fail_after(self.cfg.send_timeout_s):
                        refused = await conn.privmsgs(target, bodies)
                except (
                    OSError,
                    anyio.BrokenResourceError,
                    anyio.ClosedResourceError,
                    TimeoutError,
                ) as exc:
                    log.warning("reply %s to %s not sent yet: %r", reply.out_id, target, exc)
                else:
                    if refused is not None:
                        log.warning(
                            "reply %s refused by the server for %s: %s",
                            reply.out_id,
                            target,
                            refused,
                        )
                    return
            await anyio.sleep(Backoff(initial=0.2, maximum=5.0).delay(attempt, random.random()))
            attempt += 1


def make_channel(raw: dict[str, Any], common: AdapterSection) -> IrcChannel:
    cfg = section(raw, "irc", IrcSection)
    password = read_secret(
        "irc-password", cfg.password_file, required=cfg.password_file is not None
    )
    return IrcChannel(cfg, common, password)


if __name__ == "__main__":
    sys.exit(main(None, "irc", make_channel))
