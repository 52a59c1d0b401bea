"""Kill -9 the daemon while adapters push as fast as they can; nothing acked is lost.

Several adapter connections pipeline thousands of messages from hundreds of
senders. When a random share of them has been acked the daemon gets SIGKILL.
After a restart every acked msg_id must be in the ledger exactly once with its
queue item, and sending everything again must answer `duplicate` for exactly
the messages the ledger holds: the acked ones, plus any whose commit finished
while its ack was still on the way when the process died.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable
from typing import Any

import anyio
import orjson
import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess, gone_within, writer_pid
from wire.client import BrokerClient

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CONNECTIONS = 6
PER_CONNECTION = 2000
TOTAL = CONNECTIONS * PER_CONNECTION
SENDERS = 300
WINDOW = 200
CHUNK = 50


def inbound(conn_no: int, i: int) -> bytes:
    return (
        orjson.dumps(
            {
                "type": "inbound",
                "req": f"{conn_no}:{i}",
                "msg_id": f"c{conn_no}-m{i}",
                "sender_id": f"s{(i * 31 + conn_no) % SENDERS}",
                "peer_kind": "dm",
                "text": f"message {i} of connection {conn_no}",
                "queue_mode": "queue",
            }
        )
        + b"\n"
    )


async def pipeline(
    daemon: DaemonProcess,
    conn_no: int,
    on_ack: Callable[[dict[str, Any]], None],
    on_error: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Send one connection's messages with at most WINDOW un-acked."""
    async with await BrokerClient.connect(daemon.socket, role="adapter", channel="crash") as client:
        window = anyio.Semaphore(WINDOW)
        received = 0

        async def reader() -> None:
            nonlocal received
            while received < PER_CONNECTION:
                frame = await client.recv()
                if frame["type"] in ("delta", "deliver"):
                    continue  # replies of the turns these messages start
                if frame["type"] == "error" and on_error is not None:
                    on_error(frame)
                else:
                    assert frame["type"] == "ack", frame
                    on_ack(frame)
                received += 1
                window.release()

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            for start in range(0, PER_CONNECTION, CHUNK):
                for _ in range(CHUNK):
                    await window.acquire()
                await client.send_raw(
                    b"".join(inbound(conn_no, i) for i in range(start, start + CHUNK))
                )


async def push_until_killed(
    daemon: DaemonProcess,
    acked: set[str],
    kill_at: int,
    victim: int | None = None,
    errors: list[dict[str, Any]] | None = None,
) -> None:
    """Push until `kill_at` acks, then SIGKILL `victim` (the daemon by default).

    Error answers are collected in `errors` when it is given, else they fail the test.
    """
    killed = anyio.Event()
    assert daemon.proc is not None
    pid = daemon.proc.pid if victim is None else victim

    def on_ack(frame: dict[str, Any]) -> None:
        acked.add(frame["msg_id"])
        if len(acked) >= kill_at and not killed.is_set():
            os.kill(pid, signal.SIGKILL)
            killed.set()

    async def one(conn_no: int) -> None:
        try:
            await pipeline(daemon, conn_no, on_ack, None if errors is None else errors.append)
        except* (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            pass  # the daemon died under us: that is the point

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for n in range(CONNECTIONS):
                tg.start_soon(one, n)


async def writer_process(daemon: DaemonProcess) -> int:
    pid = await writer_pid(daemon.socket)
    assert pid is not None and daemon.proc is not None and pid != daemon.proc.pid
    return pid


def check_ledger(daemon: DaemonProcess, acked: set[str]) -> set[str]:
    """Every acked message stored once with its queue item; returns what is stored."""
    with daemon.db() as db:
        stored = [r[0] for r in db.execute("SELECT msg_id FROM inbound")]
        orphans = db.execute(
            "SELECT count(*) FROM inbound i LEFT JOIN queue_items q ON q.inbound_id = i.id"
            " WHERE q.seq IS NULL"
        ).fetchone()[0]
        items = db.execute("SELECT count(*) FROM queue_items").fetchone()[0]
    assert len(stored) == len(set(stored)), "a message is stored twice"
    assert acked <= set(stored), f"acked but lost: {sorted(acked - set(stored))[:5]}"
    assert orphans == 0, "a message without its queue item"
    assert items == len(stored), "a queue item without its message"
    return set(stored)


async def resend_all(daemon: DaemonProcess) -> dict[str, bool]:
    answers: dict[str, bool] = {}

    def on_ack(frame: dict[str, Any]) -> None:
        answers[frame["msg_id"]] = frame["duplicate"]

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for n in range(CONNECTIONS):
                tg.start_soon(pipeline, daemon, n, on_ack)
    return answers


# The client side needs only one backend. Trio: on asyncio, anyio's Unix stream can
# fail when a pending receive is cancelled as the killed daemon's socket turns readable.
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_kill9_loses_no_acked_message(make_daemon: DaemonFactory, seed: int) -> None:
    kill_at = random.Random(seed).randrange(TOTAL // 10, TOTAL * 8 // 10)
    daemon = make_daemon({"max_inflight": WINDOW * 2}, name=f"crash{seed}")
    writer = await writer_process(daemon)
    acked: set[str] = set()
    await push_until_killed(daemon, acked, kill_at)
    assert daemon.proc is not None
    assert daemon.proc.wait(10) == -signal.SIGKILL
    assert kill_at <= len(acked) < TOTAL, "the kill must land mid-stream"
    assert gone_within(writer, 10), "the writer process outlived the daemon"

    daemon.start()
    stored = check_ledger(daemon, acked)

    answers = await resend_all(daemon)
    assert len(answers) == TOTAL
    duplicates = {m for m, dup in answers.items() if dup}
    assert duplicates == stored, "duplicate must answer exactly what the ledger held"
    with daemon.db() as db:
        after = db.execute("SELECT count(*), count(DISTINCT msg_id) FROM inbound").fetchone()
    assert after == (TOTAL, TOTAL)


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_dead_writer_process_stops_the_daemon_and_loses_nothing_acked(
    make_daemon: DaemonFactory,
) -> None:
    daemon = make_daemon({"max_inflight": WINDOW * 2}, name="writer-dies")
    writer = await writer_process(daemon)
    acked: set[str] = set()
    errors: list[dict[str, Any]] = []
    await push_until_killed(daemon, acked, TOTAL // 3, victim=writer, errors=errors)
    # Messages in flight when the writer died are answered, not acked: they may
    # or may not have been stored, and the answer says to send them again.
    for error in errors:
        assert error["code"] == "internal", error
        assert "may not have been stored: send it again" in error["message"], error
    assert daemon.proc is not None
    # Nothing can be committed any more: the daemon stops by itself, and says why.
    assert daemon.proc.wait(20) == 1
    assert "ledger writer died; stopping" in daemon.log()
    assert "brokerd: stopped: the ledger writer process" in daemon.log()
    assert TOTAL // 3 <= len(acked) < TOTAL

    daemon.start()
    stored = check_ledger(daemon, acked)
    answers = await resend_all(daemon)
    assert {m for m, dup in answers.items() if dup} == stored
