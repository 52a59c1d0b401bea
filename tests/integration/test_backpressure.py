"""Backpressure that waits (ledger/writer/group_commit.py), against the real daemon.

The ledger writer process is stopped (SIGSTOP) so nothing commits, and the
writer's queue is made tiny (`ledger.writer_queue`), so many senders at once
fill it. Those past the queue wait for room instead of being refused: within
`ledger.writer_wait_s` every message is acked once the writer runs again; past
it they are answered `overloaded` and store nothing. No message is ever
dropped without an answer. A session's actor waits for room too before its own
writes: a turn due meanwhile begins (its items marked running) only once the
queue takes its record (broker/mailbox/actor.py).
"""

from __future__ import annotations

import functools
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

import anyio
import orjson
import pytest

from tests.harness import DaemonProcess, writer_pid
from tests.integration.wire import op, query

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
            frame = self.frame_any()
            if frame.get("type") not in ("delta", "deliver", "log"):
                return frame

    def frame_any(self) -> dict[str, Any]:
        data = self.file.readline()
        assert data, "the broker closed the connection"
        frame: dict[str, Any] = orjson.loads(data)
        return frame

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def answered_within(senders: list[Sender], seconds: float) -> list[Sender]:
    readable, _, _ = select.select([s.sock for s in senders], [], [], seconds)
    return [s for s in senders if s.sock in readable]


def stored(d: DaemonProcess) -> set[str]:
    return {r[0] for r in query(d, "SELECT msg_id FROM inbound WHERE channel = 'many'")}


def start(
    make_daemon: DaemonFactory, backend: str, wait_s: float, **config: Any
) -> tuple[DaemonProcess, int]:
    ledger = {"writer_queue": QUEUE, "writer_wait_s": wait_s}
    d = make_daemon({"ledger": ledger, "engine": SLOW_ENGINE, **config}, backend=backend)
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


def until(check: Callable[[], bool], what: str) -> None:
    """Poll `check` every 20 ms until it holds (bounded by WAIT)."""
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def done(d: DaemonProcess, msg_ids: set[str]) -> bool:
    """Is each of these messages done, in a completed turn?"""
    rows = query(
        d,
        "SELECT i.msg_id FROM queue_items q JOIN inbound i ON i.id = q.inbound_id"
        " JOIN turns t ON t.id = q.turn_id"
        " WHERE i.channel = 'many' AND q.status = 'done' AND t.status = 'completed'",
    )
    return msg_ids <= {r[0] for r in rows}


def ask(d: DaemonProcess, name: str, **args: Any) -> Any:
    return anyio.run(functools.partial(op, d, name, **args))


@each_backend
def test_a_turn_due_while_the_queue_is_full_begins_once_room_comes_and_runs_once(
    make_daemon: DaemonFactory, backend: str
) -> None:
    # A collect message waits a second of quiet before its turn opens: meanwhile the
    # writer stops and the other senders fill its queue, so its turn must wait.
    fast = {"delay_ms": 0, "chunks": 2}
    d, writer = start(make_daemon, backend, 30.0, engine=fast, queue={"debounce_ms": 1000})
    first = Sender(d, 999)
    senders = [Sender(d, n) for n in range(SENDERS)]
    try:
        first.send()  # a first turn: the session's actor runs, and stays while idle
        assert first.answer()["type"] == "ack"
        until(lambda: done(d, {first.msg_id}), "the first turn")
        first.msg_id = first.frame["msg_id"] = first.frame["req"] = "collected"
        first.frame["queue_mode"] = "collect"
        first.send()
        ack = first.answer()
        acked = time.monotonic()
        assert ack["type"] == "ack", ack
        os.kill(writer, signal.SIGSTOP)
        try:
            for s in senders:
                s.send()
            until(lambda: ask(d, "health")["writer_queue"] == QUEUE, "a full queue")

            def state() -> str:
                listed = ask(d, "sessions.list")
                return next(str(s["state"]) for s in listed if s["label"] == ack["session"])

            due = acked + 1.5  # past its collect deadline
            until(lambda: time.monotonic() > due, "the collect deadline")
            # Due, but not opened: the actor handles its events (here, its timer) only
            # with room for what they may write, so nothing of it went past the bound.
            assert state() == "idle"
            assert ask(d, "health")["writer_queue"] == QUEUE
        finally:
            os.kill(writer, signal.SIGCONT)
        for s in senders:
            answer = s.answer()
            assert (answer["type"], answer["msg_id"]) == ("ack", s.msg_id), answer
        everyone = {"m999", first.msg_id, *(s.msg_id for s in senders)}
        until(lambda: done(d, everyone), "every message done in a completed turn")
        per_message = query(
            d,
            "SELECT i.msg_id, count(DISTINCT m.turn_id) FROM inbound i"
            " JOIN messages m ON m.msg_id = i.msg_id AND m.role = 'user'"
            " WHERE i.channel = 'many' GROUP BY i.msg_id",
        )
        assert dict(per_message) == dict.fromkeys(everyone, 1)  # each ran once
        (intent,) = query(
            d,
            "SELECT count(*) FROM turn_events e JOIN queue_items q ON q.turn_id = e.turn_id"
            " JOIN inbound i ON i.id = q.inbound_id WHERE i.msg_id = ? AND e.type = 'intent'",
            first.msg_id,
        )
        assert intent == (1,)  # and its events were written
    finally:
        for s in [first, *senders]:
            s.close()
