"""The daemon on the ledger on PostgreSQL (`[ledger] kind = "postgres"`): end to
end, an unreachable database at start, and the database killed under it.

Each test runs a private PostgreSQL cluster of its own (ledger/postgres/devcluster.py),
as the last one stops and starts it. tests/integration/postgres/ runs the
protocol tests on PostgreSQL as a second configuration.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess, brokerd_once, write_config
from tests.integration.storage_faults import WAIT, answer, storage_back, until_health
from tests.temporal_runtime import runtime_config
from wire.client import BrokerClient

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

EX_UNAVAILABLE = 69


@pytest.fixture
def cluster() -> Iterator[Any]:
    from ledger.postgres import devcluster

    running = devcluster.create(durable=False)
    try:
        yield running
    finally:
        running.destroy()


def on_postgres(cluster: Any, **more: Any) -> dict[str, Any]:
    from ledger.postgres import devcluster

    # No template: the daemon migrates the empty database itself.
    return {"ledger": {"kind": "postgres", "dsn": devcluster.fresh_database(cluster, "ledger")}}


def inbound(i: int, text: str = "hello") -> dict[str, Any]:
    return {
        "type": "inbound",
        "req": f"r{i}",
        "msg_id": f"m{i}",
        "sender_id": f"+1555{i:04d}",
        "peer_kind": "dm",
        "text": f"{text} {i}",
    }


def rows(d: DaemonProcess, sql: str) -> list[tuple[Any, ...]]:
    conn = d.db()
    try:
        return [tuple(r) for r in conn.execute(sql).fetchall()]
    finally:
        conn.close()


async def all_answered(d: DaemonProcess, msg_ids: set[str]) -> list[tuple[Any, ...]]:
    """(msg_id, item status, turns of its session) once every item is done."""
    sql = (
        "SELECT i.msg_id, q.status, s.turns FROM inbound i"
        " JOIN queue_items q ON q.inbound_id = i.id JOIN sessions s ON s.label = q.session_label"
    )
    found: list[tuple[Any, ...]] = []
    with anyio.move_on_after(WAIT):
        while True:
            found = await anyio.to_thread.run_sync(rows, d, sql)
            if {r[0] for r in found} == msg_ids and all(r[1] == "done" for r in found):
                return found
            await anyio.sleep(0.1)
    raise AssertionError(f"acked {sorted(msg_ids)}, in the ledger: {sorted(found)}")


async def test_a_message_is_acked_answered_and_listed(
    cluster: Any, make_daemon: DaemonFactory, anyio_backend: str
) -> None:
    d = make_daemon(on_postgres(cluster), backend=anyio_backend)
    async with (
        await BrokerClient.connect(d.socket, role="adapter", channel="sms") as adapter,
        await BrokerClient.connect(d.socket) as operator,
    ):
        ack = await answer(adapter, inbound(1, "hi there"))
        assert ack["type"] == "ack" and ack["duplicate"] is False
        with anyio.fail_after(WAIT):
            deliver = await adapter.recv()
            while deliver["type"] != "deliver":
                deliver = await adapter.recv()
        assert deliver["text"] == "hi there 1" and deliver["in_reply_to"] == ["m1"]
        again = await answer(adapter, inbound(1, "hi there"))
        assert again["type"] == "ack" and again["duplicate"] is True
        assert again["item"] == ack["item"]
        sessions = await operator.op("sessions.list")
        health = await operator.op("health")
        found = await operator.op("recall.search", query="there")
    assert [(s["label"], s["turns"]) for s in sessions] == [(ack["session"], 1)]
    assert health["ok"] is True and health["ledger"] == "postgres"
    assert {h["session"] for h in found} == {ack["session"]}


def test_an_unreachable_database_at_start_exits_69_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    nowhere = tmp_path / "no-server-here"
    write_config(
        config,
        {
            "socket_path": str(tmp_path / "b.sock"),
            "ledger": {
                "kind": "postgres",
                "dsn": f"postgresql://broker:s3cret@/ledger?host={nowhere}",
            },
        },
    )
    done = brokerd_once(config)
    assert done.returncode == EX_UNAVAILABLE, done.stderr
    assert str(nowhere) in done.stderr and "s3cret" not in done.stderr + done.stdout


@pytest.mark.slow
async def test_postgres_killed_and_restarted_loses_no_ack_and_service_resumes(
    cluster: Any, make_daemon: DaemonFactory, anyio_backend: str
) -> None:
    await kill_postgres_and_restart(
        cluster, make_daemon(on_postgres(cluster), backend=anyio_backend)
    )


@pytest.mark.slow
@pytest.mark.temporal
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the Temporal SDK is asyncio's
async def test_postgres_killed_under_the_temporal_runtime_loses_no_ack_and_resumes(
    cluster: Any, make_daemon: DaemonFactory, temporal_server: Any
) -> None:
    """The issue's fault on the clustered path: the node's ledger is PostgreSQL and its
    sessions are Temporal workflows, whose turn activities find the ledger gone."""
    config = {**on_postgres(cluster), "runtime": runtime_config(temporal_server.address)}
    await kill_postgres_and_restart(cluster, make_daemon(config))


async def kill_postgres_and_restart(cluster: Any, d: DaemonProcess) -> None:
    """PostgreSQL crashes under a serving daemon and comes back: adapters see
    `overloaded` or `internal` meanwhile, nothing acked is lost, each acked message is
    answered once, and the daemon serves again by itself."""
    acked: dict[str, dict[str, Any]] = {}
    held: dict[str, Any] | None = None  # sent as the server went away: no answer yet
    refused: list[dict[str, Any]] = []
    async with (
        await BrokerClient.connect(d.socket, role="adapter", channel="sms") as adapter,
        await BrokerClient.connect(d.socket) as operator,
    ):
        for i in range(5):
            reply = await answer(adapter, inbound(i))
            assert reply["type"] == "ack", reply
            acked[reply["msg_id"]] = reply

        await anyio.to_thread.run_sync(cluster.stop, "immediate")  # a crash: no checkpoint
        first = inbound(5)
        await adapter.send(first)
        with anyio.move_on_after(1.0):
            reply = await adapter.recv_until(first["req"])
            # Another write (a turn's, a delivery's) found the server gone first.
            assert reply["type"] == "error" and reply["code"] == "overloaded", reply
            refused.append(first)
        if not refused:
            held = first  # its write failed and waits to be run again
        failing = await until_health(operator, ok=False)
        assert failing["ledger"] == "postgres" and failing["problems"], failing
        late = inbound(6)
        reply = await answer(adapter, late)
        assert reply["type"] == "error" and reply["code"] in ("overloaded", "internal"), reply
        refused.append(late)

        await anyio.to_thread.run_sync(cluster.start)
        back = time.monotonic()
        await storage_back(adapter, operator, held, refused, acked)
        resumed = time.monotonic() - back
        print(f"PostgreSQL back: the daemon served again after {resumed:.2f} s")
        assert resumed <= 10, f"service resumed {resumed:.1f} s after PostgreSQL came back"

    # Every acked message is in the ledger once, and was answered by exactly one turn.
    answered = await all_answered(d, set(acked))
    assert sorted(r[0] for r in answered) == sorted(acked)
    assert all(r[2] == 1 for r in answered), answered
    assert d.proc is not None and d.proc.poll() is None, "the daemon died"
