"""The shared body of the chat-server adapters (IRC, XMPP, …): server ⇄ broker.

A protocol module supplies a `Channel`: its connection loop pushes `Incoming`
messages, and it carries replies out. This module runs the two pumps between
it and the broker (the SDK's `Adapter`), the signals, and the exit status.

Inbound messages go to the broker one at a time, in the order the server gave them,
and a message's `on_ack` (store the position, drop it from the spool) runs only after
the broker's ack; a message the broker refuses is logged with its msg_id and passed
over, so one bad message never blocks the ones after it. A reply is confirmed
(`delivered`) only after `Channel.deliver` returned, which it does once the server
accepted the reply; until then the channel retries, and the broker keeps the reply.
The exit status is 0 after SIGTERM/SIGINT, 75 when the server stayed unavailable past
`give_up_s` (retry.py), 78 for a configuration the adapter cannot use (a bad file, a
missing secret, a refused token).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from adapters.retry import TEMPFAIL, ServerUnavailable
from adapters.sdk import Adapter, Backoff, Deliver, Delta, HandshakeRefused, MessageRejected, Tuning
from adapters.settings import (
    AdapterSection,
    BrokerSection,
    SettingsError,
    load_file,
    read_secret,
    section,
)

log = logging.getLogger("adapters.bridge")

EX_CONFIG = 78  # sysexits.h: a configuration error, restarting will not help
INBOX_SIZE = 256  # a full inbox stops reading the server: backpressure to TCP
# The broker is a local socket: retrying it every second at most costs nothing
# and gets a restarted broker's messages flowing sooner than the SDK's 5 s cap.
BROKER_TUNING = Tuning(reconnect=Backoff(initial=0.05, maximum=1.0))


@dataclass(frozen=True, slots=True)
class Target:
    """Where a session's replies go (learned from its inbound messages)."""

    peer_kind: str
    peer_id: str
    thread_id: str | None = None


@dataclass(slots=True)
class Incoming:
    """One message from the server, as the broker's `inbound` fields."""

    msg_id: str
    sender_id: str
    text: str
    peer_kind: str = "dm"
    peer_id: str | None = None
    thread_id: str | None = None
    sender_name: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    ts: str | None = None
    on_ack: Callable[[], None] | None = None  # after the broker's ack

    def target(self) -> Target:
        return Target(self.peer_kind, self.peer_id or self.sender_id, self.thread_id)


class Channel(Protocol):
    """What a protocol module provides."""

    async def run(self, inbox: MemoryObjectSendStream[Incoming]) -> None:
        """Connect, reconnect, push messages; raise ServerUnavailable to give up."""

    async def deliver(self, reply: Deliver) -> None:
        """Carry a reply out; return once the server accepted it (retrying till then)."""

    async def delta(self, delta: Delta, target: Target) -> None:
        """A chunk of a reply still streaming (best effort)."""


@dataclass
class Bridge:
    adapter: Adapter
    channel: Channel
    targets: dict[str, Target] = field(default_factory=dict)  # session -> where it talks
    sent: int = 0
    rejected: int = 0

    async def pump_in(self, inbox: MemoryObjectReceiveStream[Incoming]) -> None:
        async for message in inbox:
            fields = {
                "msg_id": message.msg_id,
                "sender_id": message.sender_id,
                "text": message.text,
                "peer_kind": message.peer_kind,
                "peer_id": message.peer_id,
                "thread_id": message.thread_id,
                "sender_name": message.sender_name,
                "meta": message.meta or None,
                "ts": message.ts,
            }
            log.debug("message %s to the broker", message.msg_id)
            try:
                ack = await self.adapter.send_inbound(
                    {k: v for k, v in fields.items() if v is not None}
                )
            except MessageRejected as exc:
                self.rejected += 1
                log.warning("message %s refused by the broker, skipped: %s", message.msg_id, exc)
            else:
                self.sent += 1
                self.targets[ack.session] = message.target()
            if message.on_ack is not None:
                message.on_ack()

    async def pump_out(self) -> None:
        async for reply in self.adapter.replies():
            if isinstance(reply, Delta):
                target = self.targets.get(reply.session)
                if target is not None:
                    await self.channel.delta(reply, target)
                continue
            log.debug("reply %s to %s", reply.out_id, reply.peer_id)
            await self.channel.deliver(reply)
            await self.adapter.confirm(reply.out_id)
            log.debug("reply %s accepted by the server", reply.out_id)


async def _until_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("signal %d: stopping", signum)
            scope.cancel()
            return


async def run_bridge(broker: BrokerSection, token: str | None, channel: Channel) -> int:
    """Run until a signal (0), a server given up on (75) or a refused token (78)."""
    send, receive = anyio.create_memory_object_stream[Incoming](INBOX_SIZE)
    gave_up: ServerUnavailable | None = None
    try:
        async with Adapter.connect(
            broker.socket, broker.channel, token, require_first=False, tuning=BROKER_TUNING
        ) as adapter:
            bridge = Bridge(adapter, channel)
            async with send, receive, anyio.create_task_group() as tg:
                tg.start_soon(_until_signal, tg.cancel_scope)
                tg.start_soon(bridge.pump_in, receive)
                tg.start_soon(bridge.pump_out)
                try:
                    await channel.run(send)
                except ServerUnavailable as exc:
                    gave_up = exc
                tg.cancel_scope.cancel()
    except HandshakeRefused as exc:
        log.error("the broker refused this adapter: %s", exc)
        return EX_CONFIG
    if gave_up is not None:
        log.error("giving up: %s; exit %d (temporary failure)", gave_up, TEMPFAIL)
        return TEMPFAIL
    return 0


def main(
    argv: Sequence[str] | None,
    prog: str,
    make_channel: Callable[[dict[str, Any], AdapterSection], Channel],
    backend: str = "asyncio",
) -> int:
    """`python -m adapters.<prog> --config FILE`: the exit status."""
    parser = argparse.ArgumentParser(prog=f"python -m adapters.{prog}")
    parser.add_argument("--config", type=Path, required=True, help="the adapter's TOML file")
    args = parser.parse_args(argv)
    try:
        raw = load_file(args.config)
        broker = section(raw, "broker", BrokerSection)
        common = section(raw, "adapter", AdapterSection)
        logging.basicConfig(
            level=common.log_level.upper(),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
        logging.getLogger("slixmpp").setLevel(max(logging.INFO, logging.root.level))
        common.state_dir.mkdir(parents=True, exist_ok=True)
        token = read_secret("broker-token", broker.token_file, required=False)
        channel = make_channel(raw, common)
    except SettingsError as exc:
        print(f"adapters.{prog}: {exc}", file=sys.stderr)
        return EX_CONFIG
    return anyio.run(run_bridge, broker, token, channel, backend=backend)
