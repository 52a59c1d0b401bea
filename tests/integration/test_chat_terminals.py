"""`brokerctl chat`: several terminals on one daemon, each person's replies in their own.

Real chat processes on a real daemon (the echo engine answers with the input
text). Each terminal is started, sends one line, and sees a reply printed
somewhere before the next starts, so every earlier terminal is still connected
when a later one's reply is routed.
"""

from __future__ import annotations

import subprocess

import anyio
import anyio.abc
import pytest

from adapters.sdk import Adapter
from tests.harness import DaemonProcess
from tests.integration.test_adapters import (
    OUTBOX_STATUS,
    brokerctl,
    clean_env,
    next_deliver,
    shared,
)
from tests.integration.wire import WAIT, query, uniq

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]
__all__ = ["shared"]  # the module's daemon fixture, shared with test_adapters
PEOPLE = ("ann", "bob", "cid", "dee")


class Terminal:
    """One `brokerctl chat` process and the lines it printed."""

    printed = anyio.Event()  # replaced by each test: set when any terminal prints a line

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.lines: list[str] = []

    async def read(self) -> None:
        assert self.process.stdout is not None
        pending = b""
        async for chunk in self.process.stdout:
            pending += chunk
            *done, pending = pending.split(b"\n")
            self.lines += [line.decode() for line in done]
            if done:
                Terminal.printed.set()

    async def say(self, text: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(text.encode() + b"\n")


async def open_terminal(socket: str, channel: str, person: str) -> Terminal:
    command = [*brokerctl(), "chat", "-s", socket, "--channel", channel, "--sender", person]
    process = await anyio.open_process(
        [*command, "--no-status", "--wait", "5"], env=clean_env(), stderr=subprocess.DEVNULL
    )
    return Terminal(process)


async def test_each_terminal_prints_only_the_replies_to_its_own_person(
    shared: DaemonProcess,
) -> None:
    channel = uniq("t")
    terminals: dict[str, Terminal] = {}
    async with anyio.create_task_group() as tg:
        for person in PEOPLE:
            Terminal.printed = anyio.Event()
            terminal = terminals[person] = await open_terminal(str(shared.socket), channel, person)
            tg.start_soon(terminal.read)
            await terminal.say(f"hello from {person}")
            with anyio.fail_after(WAIT):  # its reply reached a terminal: it is connected
                await Terminal.printed.wait()
        for terminal in terminals.values():
            assert terminal.process.stdin is not None
            await terminal.process.stdin.aclose()
        with anyio.fail_after(WAIT + 10):
            codes = {p: await t.process.wait() for p, t in terminals.items()}
    assert {p: t.lines for p, t in terminals.items()} == {p: [f"hello from {p}"] for p in PEOPLE}
    assert codes == dict.fromkeys(PEOPLE, 0)


async def test_a_terminal_leaves_another_persons_waiting_reply_for_them(
    shared: DaemonProcess,
) -> None:
    """Ann's reply, unconfirmed when her adapter left, is in the channel's backlog
    that Bob's terminal gets when it connects: it shows none of it and confirms
    none of it, so it still waits for Ann."""
    channel = uniq("t")
    async with Adapter.connect(shared.socket, channel) as ann:
        await ann.send(uniq("m"), "ann", "for ann only")
        reply = await next_deliver(ann)  # received, never confirmed
    bob = await open_terminal(str(shared.socket), channel, "bob")
    async with anyio.create_task_group() as tg:
        tg.start_soon(bob.read)
        await bob.say("hello from bob")
        assert bob.process.stdin is not None
        await bob.process.stdin.aclose()
        with anyio.fail_after(WAIT + 10):
            code = await bob.process.wait()
    assert (bob.lines, code) == (["hello from bob"], 0)
    assert query(shared, OUTBOX_STATUS, reply.out_id) == [("pending",)]
