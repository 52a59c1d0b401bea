"""IRC adapter benchmark: a real client → ngIRCd → adapters.irc → broker (echo) → back.

    .venv/bin/python -m bench.adapters_irc [--messages 200] [--rate 10] [--clients 8]

Prints, for the adapter and for the server alone (a second plain client that
echoes every private message, on the same server): the round trip p50/p99 at
`--rate` messages per second, and the closed-loop rate with `--clients`
conversations in lockstep. ngIRCd runs with its flood throttle off
(MaxPenaltyTime = 0) and the adapter's own rate limit raised, or both would
pace the run at ~1-2 lines/s, which is what they are for on a real network.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio

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
from tests.realservers.irc_client import IrcClient, privmsg_from
from tests.realservers.servers import Server, start_ngircd


def conversation(client: IrcClient, peer: str) -> tuple[Send, Receive]:
    async def send(text: str) -> None:
        await client.say(peer, text)

    async def receive() -> str:
        line = await client.expect(privmsg_from(peer), within=30)
        return line.params[1]

    return send, receive


async def echo_peer(server: Server, nick: str) -> None:
    """The server's own round trip: a plain client that says back what it is told."""
    echo = await IrcClient.connect(server.port, nick)
    while True:
        line = await echo.expect(lambda x: x.command == "PRIVMSG", within=3600)
        await echo.say(line.nick, line.params[1])


async def measure(server: Server, socket: Path, args: argparse.Namespace) -> list[Figures]:
    figures: list[Figures] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(echo_peer, server, "echo")
        clients = [await IrcClient.connect(server.port, f"c{n}") for n in range(args.clients)]
        await anyio.sleep(0.5)  # the echo peer registered
        # The three round trips first, on a fresh daemon, then the closed loops.
        figures.append(await broker_alone(str(socket), args.rate, args.messages))
        pairs = (("echo", "server alone (echo client)"), ("benchbot", "adapter"))
        for peer, label in pairs:
            send, receive = conversation(clients[0], peer)
            figures.append(
                await open_loop(
                    f"{label}, {args.rate:g} msg/s", send, receive, args.rate, args.messages
                )
            )
        for peer, label in pairs:
            figures.append(
                await closed_loop(
                    f"{label}, {args.clients} clients closed loop",
                    [conversation(c, peer) for c in clients],
                    args.seconds,
                )
            )
        tg.cancel_scope.cancel()
    return figures


def main() -> None:
    args = arguments(__doc__, clients=8)
    work = workdir("irc")
    with start_ngircd() as server:
        section = {
            "host": server.host,
            "port": server.port,
            "nick": "benchbot",
            "rate_per_s": 10000.0,
            "burst": 10000,
        }
        with broker_and_adapter("irc", work, section) as (daemon, _adapter):
            for figure in anyio.run(measure, server, daemon.socket, args):
                print(figure.line())


if __name__ == "__main__":
    main()
