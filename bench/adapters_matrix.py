"""Matrix adapter benchmark: a real client → Synapse → adapters.matrix → broker (echo) → back.

    .venv/bin/python -m bench.adapters_matrix [--messages 200] [--rate 10] [--clients 4]

Prints, for the adapter and for the server alone (a second matrix-nio client
that echoes every message in its DM rooms, on the same server): the round trip
p50/p99 at `--rate` messages per second, and the closed-loop rate with
`--clients` conversations in lockstep; and the broker's own round trip through
the SDK. Each person long-polls /sync; a reply counts as arrived when an event
(or an edit) with its whole text does.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

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
from tests.realservers.matrix_client import MatrixPerson, joined, text_of
from tests.realservers.servers import Server, start_synapse


class Person(MatrixPerson):
    """A bench client: a sync loop routes other people's texts to per-room inboxes."""

    def __init__(self, server: Server, name: str, echo: bool = False) -> None:
        super().__init__(server, name)
        self.echo = echo
        self.inboxes: dict[str, tuple[MemoryObjectSendStream[str], MemoryObjectReceiveStream[str]]]
        self.inboxes = {}

    def inbox(
        self, room_id: str
    ) -> tuple[MemoryObjectSendStream[str], MemoryObjectReceiveStream[str]]:
        if room_id not in self.inboxes:
            self.inboxes[room_id] = anyio.create_memory_object_stream[str](math.inf)
        return self.inboxes[room_id]

    async def sync_forever(self) -> None:
        while True:
            answer = await self.client.sync(30_000, since=self.since)
            self.since = getattr(answer, "next_batch", self.since)
            for room_id in getattr(getattr(answer, "rooms", None), "invite", {}) or {}:
                await self.join(room_id)
            for room_id, info in getattr(getattr(answer, "rooms", None), "join", {}).items():
                for event in info.timeline.events:
                    await self._seen({**event.source, "room_id": room_id})

    async def _seen(self, event: dict[str, Any]) -> None:
        if event.get("type") != "m.room.message" or event.get("sender") == self.user_id:
            self.seen.append(event)
            return
        text = text_of(event)
        if text is None:
            return
        if self.echo:
            await self.say(event["room_id"], text)
        else:
            self.inbox(event["room_id"])[0].send_nowait(text)

    def conversation(self, room_id: str) -> tuple[Send, Receive]:
        inbox = self.inbox(room_id)[1]

        async def send(text: str) -> None:
            await self.say(room_id, text)

        async def receive() -> str:
            with anyio.fail_after(30):
                return await inbox.receive()

        return send, receive


async def dm(person: Person, other: str, echo: Person) -> str:
    """A DM room of `person` with `other` (the bot joins by itself, the echo client here)."""
    room = await person.room([other], direct=True)
    if other == echo.user_id:
        await echo.join(room)
    await person.expect(joined(other, room), within=30)
    return room


async def measure(server: Server, socket: Path, args: argparse.Namespace) -> list[Figures]:
    figures: list[Figures] = []
    echo = await Person(server, "echo", echo=True).start()
    clients = [await Person(server, f"c{n}").start() for n in range(args.clients)]
    pairs = (("@echo:localhost", "server alone (echo client)"), ("@bot:localhost", "adapter"))
    rooms = {label: [await dm(c, user, echo) for c in clients] for user, label in pairs}
    async with anyio.create_task_group() as tg:
        for person in (echo, *clients):
            tg.start_soon(person.sync_forever)
        # The three round trips first, on a fresh daemon, then the closed loops.
        figures.append(await broker_alone(str(socket), args.rate, args.messages))
        for label, dms in rooms.items():
            send, receive = clients[0].conversation(dms[0])
            figures.append(
                await open_loop(
                    f"{label}, {args.rate:g} msg/s", send, receive, args.rate, args.messages
                )
            )
        for label, dms in rooms.items():
            figures.append(
                await closed_loop(
                    f"{label}, {args.clients} clients closed loop",
                    [c.conversation(room) for c, room in zip(clients, dms, strict=True)],
                    args.seconds,
                )
            )
        tg.cancel_scope.cancel()
    for person in (echo, *clients):
        await person.close()
    return figures


def main() -> None:
    args = arguments(__doc__, clients=4)
    work = workdir("matrix")
    accounts = {"bot": "b", "echo": "e", **{f"c{n}": "c" for n in range(args.clients)}}
    (work / "matrix-password").write_text("b\n")
    with start_synapse(accounts) as server:
        section = {
            "homeserver": f"http://{server.host}:{server.port}",
            "user_id": "@bot:localhost",
            "password_file": str(work / "matrix-password"),
        }
        with broker_and_adapter("matrix", work, section) as (daemon, _adapter):
            for figure in anyio.run(measure, server, daemon.socket, args):
                print(figure.line())


if __name__ == "__main__":
    main()
