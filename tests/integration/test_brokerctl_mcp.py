"""`brokerctl mcp` (docs/mcp.md), driven by the `mcp` SDK's own client over stdio against
a running daemon: the four tools, `session_history`'s pages, `send_message` queueing a
task that the session's engine answers, and the daemon's error answer as a tool error.
Run as a uid of role `read` (`[operators]`; the server drops to it as it starts), it
may read, and `send_message` is a `forbidden` tool error that queues nothing."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from tests.integration.test_roles import READER, reachable_daemon
from tests.integration.wire import Adapter, items, query, uniq

# The client on trio, the daemon on asyncio and on trio (any_backend_daemon).
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["trio"])]


def structured(result: Any) -> Any:
    assert not result.is_error, result.content
    data = result.structured_content
    if isinstance(data, dict) and set(data) == {"result"}:
        return data["result"]
    return data if data is not None else json.loads(result.content[0].text)


async def test_brokerctl_mcp_serves_the_four_tools(
    any_backend_daemon: DaemonProcess, anyio_backend: str
) -> None:
    from mcp import Client, StdioServerParameters

    d = any_backend_daemon
    sender, channel = uniq("+"), uniq("t")
    async with await Adapter.connect(d, channel) as a:
        session = ""
        for text in ("hello otters", "second", "third"):
            session = (await a.send_inbound(uniq("m"), text, sender))["session"]
            await a.deliver(session=session)
        brokerctl = StdioServerParameters(
            command=sys.executable,
            args=[
                "-c",
                "from brokerctl.main import main; main()",
                "--socket",
                str(d.socket),
                "mcp",
            ],
        )
        async with Client(brokerctl) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            listed = structured(await client.call_tool("sessions_list", {}))
            latest = structured(
                await client.call_tool("session_history", {"session": session, "page_size": 2})
            )
            older = structured(
                await client.call_tool(
                    "session_history", {"session": session, "page": 1, "page_size": 2}
                )
            )
            hits = structured(await client.call_tool("recall_search", {"query": "otters"}))
            sent = structured(
                await client.call_tool("send_message", {"session": session, "text": "from ops"})
            )
            told = await a.deliver(session=session)
            missing = await client.call_tool("session_history", {"session": "dm:nobody"})
    assert names == {"sessions_list", "session_history", "recall_search", "send_message"}
    assert session in [row["label"] for row in listed]
    assert [t["output"] for t in latest["turns"]] == ["second", "third"] and latest["more"]
    assert [t["output"] for t in older["turns"]] == ["hello otters"] and not older["more"]
    assert any(hit.get("session") == session for hit in hits), hits
    assert sent["session"] == session
    assert "from ops" in told["text"]
    assert missing.is_error and "not_found" in str(getattr(missing.content[0], "text", ""))


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to drop to another uid")
async def test_a_read_operator_may_read_and_is_refused_send_message(
    make_daemon: DaemonFactory, short_tmp: Path, anyio_backend: str
) -> None:
    from mcp import Client, StdioServerParameters

    d = reachable_daemon(make_daemon, short_tmp)
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(uniq("m"), "hello", uniq("+")))["session"]
        await a.deliver(session=session)
    before, every = items(d, session), query(d, "SELECT count(*) FROM queue_items")
    # brokerctl mcp, started as root by the SDK's client, drops to the reader's uid once
    # it has imported what it runs (the interpreter's own files may be root's only).
    as_reader = (
        "import os, brokerctl.main, brokerctl.mcp, mcp.server.stdio;"
        f" os.setgroups([]); os.setgid({READER}); os.setuid({READER});"
        " brokerctl.main.main()"
    )
    brokerctl = StdioServerParameters(
        command=sys.executable, args=["-c", as_reader, "--socket", str(d.socket), "mcp"]
    )
    async with Client(brokerctl) as client:
        listed = structured(await client.call_tool("sessions_list", {}))
        refused = await client.call_tool("send_message", {"session": session, "text": "sneak"})
    assert session in [row["label"] for row in listed]
    said = str(getattr(refused.content[0], "text", ""))
    assert refused.is_error and "forbidden" in said and "'read'" in said, said
    assert items(d, session) == before  # nothing queued
    assert query(d, "SELECT count(*) FROM queue_items") == every  # nor anywhere else
