"""Sessions on the Temporal runtime: one node, its own SQLite ledger
(`runtime.allow_local_ledger`), a dev server shared by the test session."""

from __future__ import annotations

from typing import Any

import pytest

from broker.runtime.temporal.devserver import DevServer
from tests.conftest import DaemonFactory
from tests.integration.wire import Adapter, uniq
from tests.temporal_runtime import runtime_config

pytestmark = [pytest.mark.anyio, pytest.mark.temporal]
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])


def on_temporal(server: DevServer, **config: Any) -> dict[str, Any]:
    return {**config, "runtime": runtime_config(server.address)}


@asyncio_only
async def test_a_message_runs_as_a_workflow_turn(
    temporal_server: DevServer, make_daemon: DaemonFactory
) -> None:
    d = make_daemon(on_temporal(temporal_server))
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
