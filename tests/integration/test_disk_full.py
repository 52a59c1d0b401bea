"""The ledger runs out of space: the broker answers `internal`, keeps running,
keeps every acked message and none of the failed ones, and recovers.

No root tricks: the RLIMIT_FSIZE of the daemon's ledger writer process is
lowered once the daemon has started and migrated its ledger (`prlimit`, the
same kernel limit a `preexec_fn` calling `setrlimit` would set, but placed
after start so the limit can be sized from the files the daemon actually has).
CPython ignores SIGXFSZ, so a write past the limit fails with EFBIG and SQLite
reports a disk I/O error. Only the soft
limit is lowered, so the test can raise it again without privileges.
"""

from __future__ import annotations

import resource
import sqlite3
from typing import Any

import anyio
import orjson
import pytest

from broker.client import BrokerClient, BrokerError
from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess, writer_pid

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs prlimit (Linux)"),
]

WAIT = 10.0
MAX_TEXT = 64 << 10
HEADROOM = 400_000  # bytes any ledger file may still grow by: room for a few messages


def limit_file_size(pid: int, soft: int) -> None:
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))


def largest_file(d: DaemonProcess) -> int:
    return max(p.stat().st_size for p in d.workdir.iterdir() if p.is_file())


async def answer(c: BrokerClient, frame: dict[str, Any]) -> dict[str, Any]:
    await c.send(frame)
    with anyio.fail_after(WAIT):
        return await c.recv_until(frame["req"])


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


async def test_a_full_disk_fails_the_write_not_the_broker(
    make_daemon: DaemonFactory, anyio_backend: str
) -> None:
    # The daemon runs on the same backend (asyncio or trio) as the test's client side.
    d = make_daemon({"max_text_bytes": MAX_TEXT}, backend=anyio_backend)
    writer = await writer_pid(d.socket)  # the process that writes the ledger
    assert writer is not None
    limit_file_size(writer, largest_file(d) + HEADROOM)

    acked: dict[str, dict[str, Any]] = {}
    failed: dict[str, Any] | None = None
    async with (
        await BrokerClient.connect(d.socket, role="adapter", channel="sms") as adapter,
        await BrokerClient.connect(d.socket) as operator,
    ):
        for i in range(60):
            frame = big(i)
            reply = await answer(adapter, frame)
            if reply["type"] == "ack":
                assert reply["duplicate"] is False and reply["msg_id"] == frame["msg_id"]
                acked[frame["msg_id"]] = reply
                continue
            assert reply["type"] == "error", reply
            assert reply["code"] == "internal", reply
            assert reply["req"] == frame["req"] and reply["message"], reply
            failed = frame
            break
        assert failed is not None, "the ledger never ran out of space"
        assert acked, "the limit left no room for a single message"

        # The broker is alive, serves operators, and the connection is open.
        assert d.proc is not None and d.proc.poll() is None
        with anyio.fail_after(WAIT):
            health = await operator.op("health")
        assert health["ok"] is True and health["ledger"] == "sqlite"
        # The failed first contact left no contact, entity or session behind.
        with anyio.fail_after(WAIT), pytest.raises(BrokerError) as missing:
            await operator.op("contact.show", channel="sms", sender_id=failed["sender_id"])
        assert missing.value.code == "not_found"
        stored = {r[0] for r in ledger_rows(d, "SELECT msg_id FROM inbound")}
        assert stored == set(acked)
        # The broker logged the failure, with the req.
        logged = [orjson.loads(line) for line in d.log_lines() if line.startswith("{")]
        assert any(
            rec.get("req") == failed["req"] and rec.get("level") in ("error", "critical")
            for rec in logged
        ), d.log()[-3000:]

        # Space returns: the adapter's retry of the failed message is a new message.
        limit_file_size(writer, resource.RLIM_INFINITY)
        retry = await answer(adapter, failed)
        assert retry["type"] == "ack" and retry["duplicate"] is False, retry
        acked[failed["msg_id"]] = retry
        with anyio.fail_after(WAIT):
            shown = await operator.op("contact.show", channel="sms", sender_id=failed["sender_id"])
        assert shown["session"] == retry["session"] == f"dm:{shown['entity']}"

    assert d.proc.poll() is None, "the daemon died"
    d.kill()
    conn = sqlite3.connect(f"file:{d.ledger}?mode=ro", uri=True)
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
