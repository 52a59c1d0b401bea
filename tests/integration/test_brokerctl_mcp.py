"""`brokerctl mcp` (docs/mcp.md), driven by the `mcp` SDK's own client over stdio against
a running daemon: the four tools, `session_history`'s pages, `send_message` queueing a
task that the session's engine answers, and the daemon's error answer as a tool error."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from tests.harness import DaemonProcess
from tests.integration.wire import Adapter, uniq

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
