"""Backpressure that waits (ledger/writer.py Rule 9), against the real daemon.

The ledger writer process is stopped (SIGSTOP) so nothing commits, and the
writer's queue is made tiny (`ledger.writer_queue`), so many senders at once
fill it. Those past the queue wait for room instead of being refused: within
`ledger.writer_wait_s` every message is acked once the writer runs again; past
it they are answered `overloaded` and store nothing. No message is ever
dropped without an answer.
"""

from __future__ import annotations

import os
import select
import signal
import socket
from collections.abc import Callable
from typing import Any

import anyio
import orjson
import pytest

from tests.harness import DaemonProcess, writer_pid

from .wire import query

WAIT = 5.0  # the bound on every wait for the broker
SENDERS = 24  # well past the queue, twice the queue and the link's two batches
QUEUE = 4
DaemonFactory = Callable[..., DaemonProcess]
each_backend = pytest.mark.parametrize("backend", ["asyncio", "trio"])
# The echo engine streams its first chunk, then waits a minute: no turn ends
# (and writes) during a test.
SLOW_ENGINE = {"delay_ms": 60_000, "chunks": 1}


class Sender:
    """One adapter connection with one message to send, on plain blocking sockets."""

    def __init__(self, d: DaemonProcess, n: int) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(WAIT)
        self.sock.connect(str(d.socket))
        self.file = self.sock.makefile("rb")
        hello = {"type": "hello", "v": 1, "role": "adapter", "channel": "many"}
        self.sock.sendall(orjson.dumps(hello) + b"\n")
        assert self.answer()["type"] == "welcome"
        self.msg_id = f"m{n}"
        self.frame = {
            "type": "inbound",
            "req": self.msg_id,
            "msg_id": self.msg_id,
            "sender_id": f"+1555{n:07d}",
            "peer_kind": "dm",
            "text": f"message {n}",
        }

    def send(self) -> None:
        self.sock.sendall(orjson.dumps(self.frame) + b"\n")

    def answer(self) -> dict[str, Any]:
        while True:
            data = self.file.readline()
            assert data, "the broker closed the connection"
            frame: dict[str, Any] = orjson.loads(data)
            if frame.get("type") not in ("delta", "deliver", "log"):
                return frame

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def answered_within(senders: list[Sender], seconds: float) -> list[Sender]:
    readable, _, _ = select.select([s.sock for s in senders], [], [], seconds)
    return [s for s in senders if s.sock in readable]


def stored(d: DaemonProcess) -> set[str]:
    return {r[0] for r in query(d, "SELECT msg_id FROM inbound WHERE channel = 'many'")}


def start(make_daemon: DaemonFactory, backend: str, wait_s: float) -> tuple[DaemonProcess, int]:
    ledger = {"writer_queue": QUEUE, "writer_wait_s": wait_s}
    d = make_daemon({"ledger": ledger, "engine": SLOW_ENGINE}, backend=backend)
    writer = anyio.run(writer_pid, d.socket)
    assert writer is not None
    return d, writer


@each_backend
def test_senders_wait_for_a_stalled_writer_and_every_message_is_acked(
    make_daemon: DaemonFactory, backend: str
) -> None:
    d, writer = start(make_daemon, backend, wait_s=30.0)
    senders = [Sender(d, n) for n in range(SENDERS)]
    try:
        os.kill(writer, signal.SIGSTOP)  # nothing commits
        try:
            for s in senders:
                s.send()
            # Nothing is refused while they wait for room (nor acked: nothing commits).
            assert answered_within(senders, 0.4) == []
        finally:
            os.kill(writer, signal.SIGCONT)
        answers = [s.answer() for s in senders]
        assert [(a["type"], a["msg_id"]) for a in answers] == [
            ("ack", s.msg_id) for s in senders
        ], answers
        assert stored(d) == {s.msg_id for s in senders}
    finally:
        for s in senders:
            s.close()


@each_backend
def test_past_the_wait_senders_are_overloaded_and_nothing_is_dropped(
    make_daemon: DaemonFactory, backend: str
) -> None:
    d, writer = start(make_daemon, backend, wait_s=0.2)
    senders = [Sender(d, n) for n in range(SENDERS)]
    try:
        os.kill(writer, signal.SIGSTOP)
        try:
            for s in senders:
                s.send()
            # Those that found no room are answered once their wait is over; the
            # rest are queued: held, not refused, until the writer runs again.
            refused: list[Sender] = []
            within = WAIT  # for the first refusal, then until no more come
            while ready := answered_within([s for s in senders if s not in refused], within):
                for s in ready:
                    answer = s.answer()
                    assert (answer["type"], answer["code"], answer["req"]) == (
                        "error",
                        "overloaded",
                        s.msg_id,
                    ), answer
                    assert "stayed full" in answer["message"], answer
                    refused.append(s)
                within = 0.3
        finally:
            os.kill(writer, signal.SIGCONT)
        waiting = [s for s in senders if s not in refused]
        assert refused and waiting
        for s in waiting:
            answer = s.answer()
            assert (answer["type"], answer["msg_id"]) == ("ack", s.msg_id), answer
        assert stored(d) == {s.msg_id for s in waiting}  # a refused message stored nothing
        for s in refused:  # and is taken when sent again
            s.send()
            answer = s.answer()
            assert (answer["type"], answer["msg_id"]) == ("ack", s.msg_id), answer
        assert stored(d) == {s.msg_id for s in senders}
    finally:
        for s in senders:
            s.close()
