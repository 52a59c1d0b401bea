"""The ledger runs out of space: the broker holds the writes that fail and runs
them again, in order, once space returns; meanwhile `health` says so, new
inbound messages are refused with `overloaded`, and every acked message runs
exactly once without a restart. A ledger that stays unwritable for
`ledger.write_fail_exit_s` stops the daemon with status 74, for its supervisor
to restart it.

No root tricks: the RLIMIT_FSIZE of the daemon's ledger writer process is
lowered once the daemon has started and migrated its ledger (`prlimit`, the
same kernel limit a `preexec_fn` calling `setrlimit` would set, but placed
after start so the limit can be sized from the files the daemon actually has).
CPython ignores SIGXFSZ, so a write past the limit fails with EFBIG and SQLite
reports a disk I/O error. The limit is on the write's offset, not the file's
growth, so a limit of 0 fails every write, in place or not. Only the soft
limit is lowered, so the test can raise it again without privileges.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any

import anyio
import orjson
import pytest

from tests import ledger_checks as lc
from tests import ledger_db
from tests.conftest import DaemonFactory
from tests.ctl import in_process
from tests.harness import DaemonProcess, writer_pid
from tests.integration.storage_faults import WAIT, answer, storage_back, until_health
from wire.client import BrokerClient

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs prlimit (Linux)"),
]

MAX_TEXT = 64 << 10
HEADROOM = 400_000  # bytes any ledger file may still grow by: room for a few messages


def limit_file_size(pid: int, soft: int) -> None:
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))


def largest_file(d: DaemonProcess) -> int:
    return max(p.stat().st_size for p in d.workdir.iterdir() if p.is_file())


def big(i: int) -> dict[str, Any]:
    """A first message from a new sender, with a text near max_text_bytes."""
    return {
        "type": "inbound",
        "req": f"r{i}",
        "msg_id": f"m{i}",
        "sender_id": f"+1555000{i:04d}",
        "peer_kind": "dm",
        "text": f"{i:05d}" + "x" * (MAX_TEXT - 100),
    }


def ledger_rows(d: DaemonProcess, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = d.db()
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


async def health(operator: BrokerClient) -> dict[str, Any]:
    with anyio.fail_after(WAIT):
        result: dict[str, Any] = await operator.op("health")
    return result


def events(d: DaemonProcess, name: str) -> list[dict[str, Any]]:
    logged = [orjson.loads(line) for line in d.log_lines() if line.startswith("{")]
    return [rec for rec in logged if rec.get("event") == name]


def assert_refused_for_now(reply: dict[str, Any], frame: dict[str, Any]) -> None:
    assert reply["type"] == "error" and reply["code"] == "overloaded", reply
    assert reply["req"] == frame["req"] and "cannot write" in reply["message"], reply


async def test_a_full_disk_holds_the_write_and_refuses_new_work(
    make_daemon: DaemonFactory, anyio_backend: str
) -> None:
    # The daemon runs on the same backend (asyncio or trio) as the test's client side.
    d = make_daemon({"max_text_bytes": MAX_TEXT}, backend=anyio_backend)
    writer = await writer_pid(d.socket)  # the process that writes the ledger
    assert writer is not None
    limit_file_size(writer, largest_file(d) + HEADROOM)

    acked: dict[str, dict[str, Any]] = {}
    held: dict[str, Any] | None = None  # sent when the writes began to fail: no answer yet
    refused: list[dict[str, Any]] = []
    async with (
        await BrokerClient.connect(d.socket, role="adapter", channel="sms") as adapter,
        await BrokerClient.connect(d.socket) as operator,
    ):
        for i in range(60):
            frame = big(i)
            await adapter.send(frame)
            with anyio.move_on_after(2.0):
                reply = await adapter.recv_until(frame["req"])
                if reply["type"] == "ack":
                    assert reply["duplicate"] is False and reply["msg_id"] == frame["msg_id"]
                    acked[frame["msg_id"]] = reply
                    continue
                # Another write (a turn's) found the ledger failing first.
                assert_refused_for_now(reply, frame)
                refused.append(frame)
                break
            if not refused:
                held = frame  # its write failed and waits to be run again
            break
        else:
            raise AssertionError("the ledger never ran out of space")
        assert acked, "the limit left no room for a single message"

        # The broker is alive, says what is wrong, serves operators, and refuses
        # new work for now: never an ack it cannot keep.
        assert d.proc is not None and d.proc.poll() is None
        failing = await until_health(operator, ok=False)
        assert "cannot write" in failing["problems"][0], failing
        assert failing["ledger"] == "sqlite"
        late = big(100)
        assert_refused_for_now(await answer(adapter, late), late)
        refused.append(late)
        stored = {r[0] for r in ledger_rows(d, "SELECT msg_id FROM inbound")}
        assert stored == set(acked)

        # Space returns: the held message is acked without being sent again, and
        # the refused ones are accepted when the adapter retries them.
        limit_file_size(writer, resource.RLIM_INFINITY)
        await storage_back(adapter, operator, held, refused, acked)
        with anyio.fail_after(WAIT):
            shown = await operator.op("contact.show", channel="sms", sender_id=late["sender_id"])
        assert shown["session"] == acked[late["msg_id"]]["session"] == f"dm:{shown['entity']}"
    # Near the limit a retry may fit where the write before it did not (a WAL
    # written over from its start): the state may flap, and each change is one line.
    changes = [
        rec["event"]
        for rec in (orjson.loads(line) for line in d.log_lines() if line.startswith("{"))
        if rec.get("event") in ("ledger writes failing", "ledger writes recovered")
    ]
    assert changes and len(changes) % 2 == 0, changes
    assert changes == ["ledger writes failing", "ledger writes recovered"] * (len(changes) // 2)

    assert d.proc.poll() is None, "the daemon died"
    d.kill()
    conn = ledger_db.connect(f"file:{d.ledger}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        rows = conn.execute(
            "SELECT i.msg_id, i.item_id, i.session_label, s.label, c.entity_id"
            " FROM inbound i LEFT JOIN sessions s ON s.label = i.session_label"
            " LEFT JOIN contacts c ON c.channel = i.channel AND c.sender_id = i.sender_id"
        ).fetchall()
    finally:
        conn.close()
    assert {r[0] for r in rows} == set(acked)
    for msg_id, item, session, session_row, entity in rows:
        assert (item, session) == (acked[msg_id]["item"], acked[msg_id]["session"])
        assert session_row == session and entity is not None  # no dangling identity


TURN_S = 0.4  # each echo turn streams for this long: time to fill the disk under it
SLOW_ECHO = {"engine": {"chunks": 2, "delay_ms": int(TURN_S * 1000 / 2)}}


def doctor(d: DaemonProcess) -> tuple[int, list[dict[str, str]]]:
    done = in_process("--config", str(d.config_path), "--json", "doctor")
    return done.returncode, orjson.loads(done.stdout)


def small(i: int, sender: int) -> dict[str, Any]:
    return {
        "type": "inbound",
        "req": f"r{i}",
        "msg_id": f"m{i}",
        "sender_id": f"+1555100{sender:04d}",
        "peer_kind": "dm",
        "text": f"message {i}",
        "queue_mode": "followup",
    }


async def send_acked(adapter: BrokerClient, frames: list[dict[str, Any]]) -> dict[str, str]:
    """Send, wait for every ack; msg_id -> session."""
    for frame in frames:
        await adapter.send(frame)
    sessions = {}
    for frame in frames:
        with anyio.fail_after(WAIT):
            reply = await adapter.recv_until(frame["req"])
        assert reply["type"] == "ack", reply
        sessions[frame["msg_id"]] = reply["session"]
    return sessions


def open_items(d: DaemonProcess) -> int:
    conn = d.db()
    try:
        return lc.open_work(conn)[0]
    finally:
        conn.close()


async def until_no_open_items(d: DaemonProcess, within_s: float) -> int:
    """Items still queued or running once none are, or `within_s` passed."""
    deadline = time.monotonic() + within_s
    while True:
        still = open_items(d)
        if still == 0 or time.monotonic() > deadline:
            return still
        await anyio.sleep(0.05)


async def test_turns_that_cannot_commit_run_once_space_returns(
    make_daemon: DaemonFactory, anyio_backend: str
) -> None:
    d = make_daemon(SLOW_ECHO, backend=anyio_backend)
    writer = await writer_pid(d.socket)
    assert writer is not None
    # Four sessions, one with a second message waiting behind its first.
    frames = [small(i, sender=i) for i in range(4)] + [small(4, sender=0)]
    async with (
        await BrokerClient.connect(d.socket, role="adapter", channel="sms") as adapter,
        await BrokerClient.connect(d.socket) as operator,
    ):
        acked = await send_acked(adapter, frames)
        limit_file_size(writer, 0)  # while the turns stream: none of them can commit
        failing = await until_health(operator, ok=False)
        assert "cannot write" in failing["problems"][0], failing
        late = small(5, sender=9)
        assert_refused_for_now(await answer(adapter, late), late)
        code, findings = await anyio.to_thread.run_sync(doctor, d)
        assert code == 1 and any(
            f["check"] == "daemon" and f["level"] == "fail" and "cannot write" in f["message"]
            for f in findings
        ), findings
        # Turns ended and failed to commit: their items wait, and keep waiting.
        await anyio.sleep(2 * TURN_S)
        assert open_items(d) == len(frames)
        assert (await health(operator))["ok"] is False

        limit_file_size(writer, resource.RLIM_INFINITY)  # no restart from here on
        assert await until_no_open_items(d, WAIT) == 0
        await until_health(operator, ok=True)
        acked |= await send_acked(adapter, [late])
        assert await until_no_open_items(d, WAIT) == 0
    assert d.proc is not None and d.proc.poll() is None, "the daemon died"
    # One line when the writes began to fail and one when they came back, not
    # one per write or per message.
    assert len(events(d, "ledger writes failing")) == 1, d.log()[-3000:]
    assert len(events(d, "ledger writes recovered")) == 1, d.log()[-3000:]

    with d.db() as conn:
        view = lc.load(conn)
    assert lc.check_fates(view, [("sms", m) for m in acked]) == []
    assert lc.check_serial_turns(view) == []
    assert lc.check_no_overlap(view) == []
    assert lc.check_arrival_order(view) == []
    assert lc.check_turn_kinds(view, frozenset({"completed"})) == []


async def test_a_ledger_that_stays_unwritable_stops_the_daemon_for_a_restart(
    make_daemon: DaemonFactory, anyio_backend: str
) -> None:
    exit_s = 1.0
    d = make_daemon({**SLOW_ECHO, "ledger": {"write_fail_exit_s": exit_s}}, backend=anyio_backend)
    writer = await writer_pid(d.socket)
    assert writer is not None and d.proc is not None
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as adapter:
        acked = await send_acked(adapter, [small(0, sender=0)])
        limit_file_size(writer, 0)
        failed_at = time.monotonic()
        # The turn ends within TURN_S; its commit fails; exit_s later the daemon exits.
        with anyio.fail_after(TURN_S + exit_s + 5):
            while True:
                if d.proc.poll() is not None:
                    break
                await anyio.sleep(0.05)
    took = time.monotonic() - failed_at
    assert d.proc.returncode == os.EX_IOERR, d.log()[-3000:]
    assert took >= exit_s
    (line,) = events(d, "the ledger could not write; exiting for a restart")
    assert line["level"] == "critical" and line["status"] == os.EX_IOERR

    # A restart (the supervisor's) gets a fresh writer process: the message runs.
    d.start()
    assert await until_no_open_items(d, WAIT) == 0
    with d.db() as conn:
        view = lc.load(conn)
    assert lc.check_fates(view, [("sms", m) for m in acked]) == []


async def test_a_shutdown_does_not_wait_for_the_disk(
    make_daemon: DaemonFactory, anyio_backend: str
) -> None:
    """SIGTERM while a turn's commit waits for space: the daemon stops within its
    grace period (not `write_fail_exit_s`), and the next start runs the message."""
    grace_s = 1.0
    d = make_daemon({**SLOW_ECHO, "shutdown_grace_s": grace_s}, backend=anyio_backend)
    writer = await writer_pid(d.socket)
    assert writer is not None and d.proc is not None
    async with (
        await BrokerClient.connect(d.socket, role="adapter", channel="sms") as adapter,
        await BrokerClient.connect(d.socket) as operator,
    ):
        acked = await send_acked(adapter, [small(0, sender=0)])
        limit_file_size(writer, 0)
        await until_health(operator, ok=False)
    stopping = time.monotonic()
    assert await anyio.to_thread.run_sync(d.terminate, 15.0) == 0, d.log()[-3000:]
    assert time.monotonic() - stopping < grace_s + 5

    d.start()  # a fresh writer process, without the limit
    assert await until_no_open_items(d, WAIT) == 0
    with d.db() as conn:
        view = lc.load(conn)
    assert lc.check_fates(view, [("sms", m) for m in acked]) == []
    assert lc.check_no_overlap(view) == []
