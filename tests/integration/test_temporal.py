"""Sessions on the Temporal runtime: one node, its own SQLite ledger
(`runtime.allow_local_ledger`), a dev server shared by the test session."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from broker.runtime.temporal.devserver import DevServer, free_port
from broker.runtime.temporal.live_turns import QUERY_EVERY_S
from tests.cluster import scrape
from tests.conftest import DaemonFactory
from tests.harness import brokerd_once, write_config
from tests.integration.wire import (
    Adapter,
    assert_run_once_in_order,
    completed_inputs,
    turns,
    uniq,
    wait_until,
)
from tests.temporal_runtime import runtime_config
from wire.client import BrokerError

pytestmark = [pytest.mark.anyio, pytest.mark.temporal]
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])


def on_temporal(server: DevServer, **config: Any) -> dict[str, Any]:
    return {**config, "runtime": runtime_config(server.address)}


@asyncio_only
@pytest.mark.parametrize("sandbox", [True, False], ids=["sandboxed", "unsandboxed"])
async def test_a_message_runs_as_a_workflow_turn(
    temporal_server: DevServer, make_daemon: DaemonFactory, sandbox: bool
) -> None:
    config = on_temporal(temporal_server)
    config["runtime"]["workflow_sandbox"] = sandbox  # `[runtime] workflow_sandbox`
    d = make_daemon(config)
    async with await Adapter.connect(d, uniq("t")) as a:
        ack = await a.send_inbound("m1", "hello temporal", uniq("u"))
        reply = await a.deliver(msg_id="m1")
    assert reply["session"] == ack["session"]
    assert "hello temporal" in reply["text"]
    # It ran as the session's workflow, not in a local actor.
    assert await workflow_ran(temporal_server, ack["session"]) in ("RUNNING", "COMPLETED")


async def workflow_ran(server: DevServer, session: str) -> str:
    """The status of the session's latest workflow run, as Temporal tells it."""
    from temporalio.client import Client

    client = await Client.connect(server.address)
    described = await client.get_workflow_handle(session).describe()
    return described.status.name if described.status is not None else "UNKNOWN"


SLOW_ECHO = {"engine": {"chunks": 4, "delay_ms": 150}, "queue": {"debounce_ms": 0}}


@asyncio_only
@pytest.mark.slow
async def test_kill9_mid_turn_the_acked_message_runs_once(
    temporal_server: DevServer, make_daemon: DaemonFactory
) -> None:
    """The node dies while the turn streams; after its restart the turn's activity
    is retried (its heartbeat stopped), the cut-off turn is recorded aborted, and
    the message is an input of exactly one completed turn."""
    d = make_daemon(on_temporal(temporal_server, **SLOW_ECHO))
    sender, msg = uniq("u"), uniq("m")
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(msg, "one two three four", sender))["session"]
        await a.delta(session=session)
        await a.delta(session=session)  # its items' `running` mark has committed by now
        d.kill()
    d.start()
    await wait_until(
        lambda: anyio.to_thread.run_sync(lambda: completed_inputs(d, session) == [[msg]]),
        "the message's turn to complete after the restart",
        within=30,
    )
    statuses = [t["status"] for t in turns(d, session)]
    assert statuses == ["aborted", "completed"], statuses
    assert_run_once_in_order(d, session, [msg])


@asyncio_only
@pytest.mark.slow
async def test_a_restarted_node_reports_the_replay_of_a_session_it_took_over(
    temporal_server: DevServer, make_daemon: DaemonFactory
) -> None:
    """`[runtime] metrics_address`: the worker's metrics, and the sessions' replays
    (broker/runtime/temporal/replays.py): a node killed and restarted has none of its
    workflows cached, so the next message of a session rebuilds it from its history."""
    config = on_temporal(temporal_server)
    config["runtime"]["metrics_address"] = f"127.0.0.1:{free_port()}"
    d = make_daemon(config)
    sender = uniq("u")
    async with await Adapter.connect(d, uniq("t")) as a:
        await a.send_inbound("m1", "before the kill", sender)
        await a.deliver(msg_id="m1")
    d.kill()
    d.start()
    async with await Adapter.connect(d, uniq("t")) as a:
        await a.send_inbound("m2", "after the restart", sender)
        await a.deliver(msg_id="m2")
    metrics: dict[str, float] = {}

    async def replay_reported() -> bool:
        # The endpoint may not answer yet, and the run's metrics reach it when the
        # worker next exports them: asked again, bounded.
        nonlocal metrics
        metrics = await anyio.to_thread.run_sync(scrape, config["runtime"]["metrics_address"])
        return "session_replay_events_count" in metrics

    # The SDK exports its metrics on its own schedule, later on a busy machine.
    await wait_until(replay_reported, "the replay's metrics", within=45)
    assert metrics["session_replay_events_count"] == 1
    assert metrics["session_replay_events_sum"] >= 10  # the first turn's events, at least
    assert metrics["temporal_workflow_task_execution_latency_count"] >= 1


@asyncio_only
@pytest.mark.slow
async def test_temporal_killed_and_restarted_loses_nothing_acked(
    temporal_server: DevServer, make_daemon: DaemonFactory
) -> None:
    """While the dev server is down, messages are either acked (and run once it is
    back) or refused `overloaded`; none is acked and lost."""
    d = make_daemon(on_temporal(temporal_server))
    sender = uniq("u")
    async with await Adapter.connect(d, uniq("t")) as a:
        first = uniq("m")
        session = (await a.send_inbound(first, "before", sender))["session"]
        await a.deliver(msg_id=first)
        temporal_server.kill()
        acked, refused, codes = [first], 0, list[str]()
        try:
            for n in range(6):
                msg = uniq("m")
                try:
                    await a.send_inbound(msg, f"during {n}", sender, mode="followup")
                    acked.append(msg)
                except BrokerError as exc:
                    codes.append(exc.code)
                    refused += 1
                await anyio.sleep(0.2)
        finally:
            temporal_server.start()
        back = time.monotonic()
        assert refused > 0, "the node must say `overloaded` while Temporal is down"
        assert set(codes) == {"overloaded"}, codes
        after = uniq("m")
        await wait_until(
            lambda: _accepts(a, after, sender), "the node to take messages again", within=10
        )
        print(f"Temporal back: the node took messages again after {time.monotonic() - back:.2f} s")
        acked.append(after)
        await wait_until(
            lambda: anyio.to_thread.run_sync(
                lambda: sum(len(i) for i in completed_inputs(d, session)) == len(acked)
            ),
            "every acked message to run",
            within=30,
        )
    assert_run_once_in_order(d, session, acked)


async def _accepts(a: Adapter, msg: str, sender: str) -> bool:
    try:
        await a.send_inbound(msg, "after", sender, mode="followup")
    except BrokerError as exc:
        if exc.code != "overloaded":
            raise
        return False
    return True


def test_unreachable_temporal_exits_69_naming_the_address(short_tmp: Path) -> None:
    from broker.runtime.temporal.devserver import free_port

    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    config = short_tmp / "broker.toml"
    runtime = {**runtime_config(address), "connect_timeout_s": 2.0}
    write_config(
        config,
        {
            "socket_path": str(short_tmp / "b.sock"),
            "ledger": {"path": str(short_tmp / "l.db")},
            "runtime": runtime,
        },
    )
    done = brokerd_once(config)
    assert done.returncode == 69, done.stderr
    assert address in done.stderr


def test_temporal_on_a_sqlite_ledger_exits_78_saying_why(short_tmp: Path) -> None:
    config = short_tmp / "broker.toml"
    runtime = {**runtime_config("127.0.0.1:7233"), "allow_local_ledger": False}
    write_config(
        config,
        {
            "socket_path": str(short_tmp / "b.sock"),
            "ledger": {"path": str(short_tmp / "l.db")},
            "runtime": runtime,
        },
    )
    done = brokerd_once(config)
    assert done.returncode == 78, done.stderr
    assert "shared" in done.stderr or "share one ledger" in done.stderr


@asyncio_only
@pytest.mark.slow
async def test_a_turn_cut_by_a_clean_stop_runs_again_after_the_restart(
    temporal_server: DevServer, make_daemon: DaemonFactory
) -> None:
    """SIGTERM with a short grace: the running turn is committed aborted (shutdown),
    its activity fails for a retry, and the restarted node runs the message once."""
    config = on_temporal(temporal_server, **SLOW_ECHO, shutdown_grace_s=0.1)
    d = make_daemon(config)
    sender, msg = uniq("u"), uniq("m")
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(msg, "one two three four", sender))["session"]
        await a.delta(session=session)
        await a.delta(session=session)
        assert d.terminate() == 0
    d.start()
    await wait_until(
        lambda: anyio.to_thread.run_sync(lambda: completed_inputs(d, session) == [[msg]]),
        "the message's turn to complete after the restart",
        within=30,
    )
    statuses = [(t["status"], t["reason"]) for t in turns(d, session)]
    assert statuses == [("aborted", "shutdown"), ("completed", None)], statuses
    assert_run_once_in_order(d, session, [msg])


@asyncio_only
async def test_an_interrupt_reaches_the_running_turn_well_within_the_query_bound(
    temporal_server: DevServer, make_daemon: DaemonFactory
) -> None:
    """The workflow pushes the abort to the turn on its node (live_turns.py):
    the turn is aborted sooner than the activity's own query (`QUERY_EVERY_S`) or
    the SDK's throttled heartbeat (0.8 × heartbeat_timeout_s) would tell it."""
    slow = {"engine": {"chunks": 40, "delay_ms": 100}, "queue": {"debounce_ms": 0}}
    d = make_daemon(on_temporal(temporal_server, **slow))
    sender, first = uniq("u"), uniq("m")
    long_text = " ".join(f"w{n}" for n in range(40))  # 40 chunks: 4 s
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(first, long_text, sender))["session"]
        await a.delta(session=session)
        sent = anyio.current_time()
        await a.send_inbound(uniq("m"), "stop that", sender, mode="interrupt")

        def aborted() -> bool:
            return any(t["status"] == "aborted" for t in turns(d, session))

        await wait_until(lambda: anyio.to_thread.run_sync(aborted), "the abort", within=10)
        took = anyio.current_time() - sent
    assert took < QUERY_EVERY_S / 2, f"the abort took {took:.2f} s"


async def signals_of(server: DevServer, session: str) -> int:
    """How many item signals the session's workflow received, over its runs so far."""
    from temporalio.client import Client

    client = await Client.connect(server.address)
    handle = client.get_workflow_handle(session)
    return len(
        [
            event
            async for event in handle.fetch_history_events()
            if event.HasField("workflow_execution_signaled_event_attributes")
        ]
    )


@asyncio_only
async def test_the_open_items_rescan_hands_an_item_over_once_not_every_round(
    temporal_server: DevServer, make_daemon: DaemonFactory
) -> None:
    """The node hands the ledger's open items over again every `stuck_after_s` (an item
    whose acking node died before its hand-off); one whose signal this node already
    landed is not signalled again: each such signal is a workflow task for nothing,
    300 sessions at a time under load."""
    slow = {"engine": {"chunks": 4, "delay_ms": 300}, "queue": {"stuck_after_s": 0.2}}
    d = make_daemon(on_temporal(temporal_server, **slow))
    async with await Adapter.connect(d, uniq("t")) as a:
        ack = await a.send_inbound("m1", "a slow one", uniq("u"))
        await a.deliver(msg_id="m1")  # 1.2 s open: six rescans while it runs
    assert await signals_of(temporal_server, ack["session"]) == 1
