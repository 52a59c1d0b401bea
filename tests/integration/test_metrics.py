"""`[metrics] address`: a real Prometheus scrapes the running daemon and sees turns rise.

The daemon runs under asyncio and under trio; Prometheus is Debian's, started
here on a free port. The families the contract names are all in a scrape, with
no label that names a session or a person. An address in use stops the daemon
at start with exit 78 naming the key.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess, brokerd_once, write_config
from tests.integration.observe_servers import eventually, free_port, prometheus
from wire.client import BrokerClient

# The test's own loop is asyncio; the daemon's is parametrized where it matters.
ASYNCIO = pytest.mark.parametrize("anyio_backend", ["asyncio"])

CONTRACT = {
    "broker_inbound": "counter",
    "broker_turns": "counter",
    "broker_turn_duration_seconds": "histogram",
    "broker_queue_items": "gauge",
    "broker_stuck_sessions": "gauge",
    "broker_deliveries_unconfirmed": "gauge",
    "broker_ledger_commit_seconds": "histogram",
    "broker_engine_tokens": "counter",
    "broker_ack_seconds": "histogram",
    "broker_ledger_batch_jobs": "histogram",
    "broker_ledger_wal_bytes": "gauge",
    "broker_actors": "gauge",
    "broker_engine_first_chunk_seconds": "histogram",
}
BOUNDED_LABELS = {"outcome", "state", "model", "kind", "le"}


async def chat(d: DaemonProcess, n: int, prefix: str) -> None:
    """`n` messages from `n` people, each answered and confirmed."""
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        for i in range(n):
            await c.send(
                {
                    "type": "inbound",
                    "msg_id": f"{prefix}{i}",
                    "sender_id": f"+{prefix}{i}",
                    "peer_kind": "dm",
                    "text": f"hello {i}",
                }
            )
        finals = 0
        with anyio.fail_after(20):
            while finals < n:
                frame = await c.recv()
                if frame["type"] == "deliver" and frame.get("status") == "final":
                    finals += 1
                    await c.send({"type": "delivered", "out_id": frame["out_id"]})
        # A duplicate, answered as one.
        await c.send(
            {
                "type": "inbound",
                "msg_id": f"{prefix}0",
                "sender_id": f"+{prefix}0",
                "peer_kind": "dm",
                "text": "hello 0",
            }
        )
        with anyio.fail_after(10):
            while (frame := await c.recv())["type"] != "ack":
                pass
        assert frame["duplicate"] is True


def scrape(url: str) -> dict[str, tuple[str, list[tuple[str, dict[str, str], float]]]]:
    text = httpx.get(url, timeout=5).text
    return {
        f.name: (f.type, [(s.name, s.labels, s.value) for s in f.samples])
        for f in text_string_to_metric_families(text)
    }


@pytest.mark.anyio
@ASYNCIO
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_prometheus_sees_turns_rise(
    make_daemon: DaemonFactory, backend: str, tmp_path: Path
) -> None:
    port = free_port()
    d = make_daemon({"metrics": {"address": f"127.0.0.1:{port}"}}, backend=backend)
    url = f"http://127.0.0.1:{port}/metrics"
    with prometheus(tmp_path / "prom", f"127.0.0.1:{port}") as prom:
        await eventually(lambda: prom.query('up{job="brokerd"} == 1'))
        before = await eventually(lambda: prom.query('broker_turns_total{outcome="completed"}'))
        assert float(before[0]["value"][1]) == 0
        await chat(d, 3, "a")
        await eventually(lambda: prom.query('broker_turns_total{outcome="completed"} >= 3'))
        acked = prom.query('broker_inbound_total{outcome="acked"}')
        assert float(acked[0]["value"][1]) == 3
        assert prom.targets()[0]["health"] == "up"
    families = scrape(url)
    for name, kind in CONTRACT.items():
        assert families.get(name, ("missing",))[0] == kind, name
    for name, (_, samples) in families.items():
        for _sample, labels, _ in samples:
            assert set(labels) <= BOUNDED_LABELS, (name, labels)
    values = {
        (name, tuple(sorted(labels.items()))): value
        for _, samples in families.values()
        for name, labels, value in samples
    }
    assert values[("broker_inbound_total", (("outcome", "duplicate"),))] == 1
    assert values[("broker_turns_total", (("outcome", "completed"),))] == 3
    assert values[("broker_turn_duration_seconds_count", ())] == 3
    assert values[("broker_ack_seconds_count", ())] == 4
    # Ingests, turn starts and commits, confirmations: every commit of the writer process.
    assert values[("broker_ledger_commit_seconds_count", ())] >= 3
    assert values[("broker_ledger_batch_jobs_sum", ())] >= 9
    assert values[("broker_ledger_wal_bytes", ())] > 0
    assert values[("broker_engine_first_chunk_seconds_count", ())] == 3
    assert values[("broker_queue_items", (("state", "queued"),))] == 0
    assert values[("broker_deliveries_unconfirmed", ())] == 0
    assert values[("broker_stuck_sessions", ())] == 0


@pytest.mark.anyio
@ASYNCIO
async def test_metrics_on_a_unix_socket(make_daemon: DaemonFactory, short_tmp: Path) -> None:
    path = short_tmp / "metrics.sock"
    d = make_daemon({"metrics": {"address": str(path)}})
    await chat(d, 1, "u")
    transport = httpx.AsyncHTTPTransport(uds=str(path))
    async with httpx.AsyncClient(transport=transport) as client:
        text = (await client.get("http://broker/metrics")).text
        missing = await client.get("http://broker/nothing")
    assert 'broker_turns_total{outcome="completed"} 1.0' in text
    assert missing.status_code == 404


def test_a_metrics_address_in_use_stops_the_start(short_tmp: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = short_tmp / "broker.toml"
        write_config(
            config,
            {
                "socket_path": str(short_tmp / "b.sock"),
                "ledger": {"path": str(short_tmp / "ledger.db")},
                "metrics": {"address": f"127.0.0.1:{port}"},
            },
        )
        started = time.monotonic()
        done = brokerd_once(config)
    assert done.returncode == 78, done.stderr
    assert "metrics.address" in done.stderr and "in use" in done.stderr
    assert time.monotonic() - started < 30
    assert not (short_tmp / "b.sock").exists()


@pytest.mark.anyio
@ASYNCIO
async def test_brokerctl_top_shows_the_figures(make_daemon: DaemonFactory) -> None:
    port = free_port()
    d = make_daemon({"metrics": {"address": f"127.0.0.1:{port}"}})
    await chat(d, 2, "t")
    command = [sys.executable, "-c", "from brokerctl.main import main; main()"]
    command += ["--socket", str(d.socket), "top", "--metrics", f"127.0.0.1:{port}", "--once"]
    done = await anyio.run_process(command, check=False, env={**os.environ, "COLUMNS": "100"})
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    rows = {line.strip("│ ").split("│")[0].strip(): line for line in out.splitlines()}
    assert rows["sessions"].split()[-2] == "2"
    assert " ms " in rows["ack p99"] and rows["turns/s"].split()[-2] == "0.00"
    assert "idle" in out and "stuck sessions" in out


def value_of(url: str, name: str, **labels: str) -> float:
    for _, samples in scrape(url).values():
        for sample, got, value in samples:
            if sample == name and got == labels:
                return value
    raise AssertionError(f"no {name} {labels} in the scrape")


@pytest.mark.anyio
@ASYNCIO
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_erasures_and_expiry_move_their_figures(
    make_daemon: DaemonFactory, backend: str
) -> None:
    from tests.integration.test_identity import adapter, contact, inbound, op, operator, say, uniq

    port = free_port()
    d = make_daemon({"metrics": {"address": f"127.0.0.1:{port}"}}, backend=backend)
    url = f"http://127.0.0.1:{port}/metrics"
    channel = uniq("c")
    async with await adapter(d, channel) as a, await operator(d) as o:
        for n in range(3):
            await say(a, inbound(uniq("m"), "ivy", text=f"ivy {n}"))
            await say(a, inbound(uniq("m"), "jon", text=f"jon {n}"))
        assert value_of(url, "broker_erasures_total", state="started") == 0
        assert value_of(url, "broker_expiry_last_run_seconds") == 0  # keep_days 0: no run
        ivy = (await contact(o, channel, "ivy"))["entity"]
        done = await op(o, "entity.erase", entity=ivy, confirm=ivy)
    assert value_of(url, "broker_erasures_total", state="started") == 1
    assert value_of(url, "broker_erasures_total", state="finished") == 1
    assert value_of(url, "broker_erasure_removed_total", kind="messages") == done["messages"] >= 6
    assert value_of(url, "broker_erasure_removed_total", kind="sessions") == 1
    d.kill()
    d.config["retention"] = {"keep_days": 1e-9}
    write_config(d.config_path, d.config)
    d.start()

    def one_run() -> bool:
        try:
            return value_of(url, "broker_expiry_runs_total") == 1
        except httpx.HTTPError:  # not listening yet
            return False

    await eventually(one_run)
    assert value_of(url, "broker_expired_turns_total") == 2  # jon's, but his head
    assert value_of(url, "broker_expiry_last_run_seconds") >= time.time() - 60
