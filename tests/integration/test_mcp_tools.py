"""Tools from MCP servers offered to engines (docs/mcp.md), against a real server built
with the `mcp` SDK (tests/integration/mcp_server.py) over stdio and over HTTP.

A python engine (below) says which tools it was offered and calls the one a message
names. Only allowed tools are offered; a call's answer, or its error as a sentence,
reaches the engine and the turn completes; the call is an `action` event; a stdio
server that dies is started again; a route rule's `mcp = []` offers none and refuses
a call, and a worker spawned from such a session gets none either; a server that is
down, or that speaks something else than MCP, fails its tools, never the turn; a tool name of the
broker's, or a command that does not exist, stops the daemon at start.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonFactory
from tests.harness import brokerd_once, write_config
from tests.integration.wire import Adapter, query, turns, uniq

pytestmark = pytest.mark.anyio
SERVER = Path(__file__).parent / "mcp_server.py"

ENGINE = """
import json

from broker.engines import EngineError, EngineResult


class Caller:
    name = "caller"
    accepts_steering = False
    context_window = 8192

    async def run(self, request, io):
        said = request.inputs[-1].content
        if said.startswith("[worker"):  # a worker's result
            text = "back:" + said.split("\\n", 1)[-1].strip()
        elif said.startswith("spawn "):
            text = await io.call_tool("agent_send", {"task": said[len("spawn "):]})
        elif said == "tools?":
            text = " ".join(sorted(t.name for t in request.tools))
        else:
            name, _, args = said.partition(" ")
            try:
                text = "ok:" + await io.call_tool(name, json.loads(args or "{}"))
            except EngineError as exc:
                text = "error:" + str(exc)
        return EngineResult(text=text, model="caller")

    async def aclose(self):
        return None


engine = Caller()
"""


def mcp_config(
    folder: Path, server: dict[str, Any], timeout_s: float = 20, **more: Any
) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "caller.py").write_text(ENGINE)
    return {
        "engine": {"kind": "python", "entry": "caller:engine", "timeout_s": timeout_s},
        "queue": {"debounce_ms": 0},
        "mcp": {"servers": [{"name": "calc", "allow": ["add", "fail", "die", "slow"], **server}]},
        **more,
    }


STDIO = {"command": [sys.executable, str(SERVER), "stdio"]}


async def ask(a: Adapter, sender: str, text: str) -> str:
    session = (await a.send_inbound(uniq("m"), text, sender))["session"]
    told = await a.deliver(session=session, within=30)
    assert told["status"] == "final", told
    return str(told["text"])


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_stdio_tools_offered_called_recorded_and_a_dead_server_restarted(
    make_daemon: DaemonFactory, short_tmp: Path, backend: str
) -> None:
    d = make_daemon(mcp_config(short_tmp / "d", STDIO), backend=backend)
    sender = uniq("+")
    async with await Adapter.connect(d, uniq("t")) as a:
        offered = (await ask(a, sender, "tools?")).split()
        added = await ask(a, sender, 'add {"a": 2, "b": 3}')
        failed = await ask(a, sender, "fail")
        died = await ask(a, sender, "die")
        again = await ask(a, sender, 'add {"a": 40, "b": 2}')
        hidden = await ask(a, sender, "secret")
    assert {"add", "fail", "die", "slow", "agent_send", "scratchpad_get"} <= set(offered)
    assert "secret" not in offered
    assert added == "ok:5"
    assert failed.startswith("error:") and "this tool always fails" in failed
    assert died.startswith("error:") and "calc" in died
    assert again == "ok:42"  # the server was started again
    assert hidden == "error:the broker offers no tool named 'secret'"
    session = turns(d, query(d, "SELECT label FROM sessions LIMIT 1")[0][0])
    actions = [
        json.loads(p)
        for (p,) in query(
            d, "SELECT payload FROM turn_events WHERE type = 'action' ORDER BY created_at"
        )
    ]
    assert [(x["tool"], x["status"]) for x in actions] == [
        ("add", "ok"), ("fail", "error"), ("die", "error"), ("add", "ok"), ("secret", "error"),
    ]  # fmt: skip
    assert all(t["status"] == "completed" for t in session)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(*command: str) -> Iterator[int]:
    """A server process on a free port of 127.0.0.1 (`{port}` in `command`), once it listens."""
    port = free_port()
    proc = subprocess.Popen(
        [c.format(port=port) for c in command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def http_server() -> Iterator[str]:
    with serving(sys.executable, str(SERVER), "http", "{port}") as port:
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_http_tools_and_a_rule_that_offers_none(
    make_daemon: DaemonFactory, short_tmp: Path, http_server: str, backend: str
) -> None:
    narrowed = {"name": "none", "match": {"channel": ["narrow"]}, "mcp": []}
    d = make_daemon(
        mcp_config(short_tmp / "d", {"url": http_server}, routes=[narrowed]), backend=backend
    )
    async with await Adapter.connect(d, uniq("t")) as a:
        added = await ask(a, uniq("+"), 'add {"a": 1, "b": 1}')
    async with await Adapter.connect(d, "narrow") as a:
        sender = uniq("+")
        offered = (await ask(a, sender, "tools?")).split()
        refused = await ask(a, sender, 'add {"a": 1, "b": 1}')
    assert added == "ok:2"
    assert "add" not in offered and "agent_send" in offered
    assert refused == "error:the tool 'add' is not offered to this session"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_worker_gets_at_most_the_servers_of_the_session_it_came_from(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    narrowed = {"name": "none", "match": {"channel": ["narrow"]}, "mcp": []}
    d = make_daemon(mcp_config(short_tmp / "d", STDIO, routes=[narrowed]))
    offered: dict[str, list[str]] = {}
    for channel in ("wide", "narrow"):
        async with await Adapter.connect(d, channel) as a:
            session = (await a.send_inbound(uniq("m"), "spawn tools?", uniq("+")))["session"]
            spawned = await a.deliver(session=session, within=30)
            back = await a.deliver(session=session, within=30)
        assert "worker:" in spawned["text"], spawned
        assert back["text"].startswith("back:"), back
        offered[channel] = back["text"].removeprefix("back:").split()
    assert {"add", "worker_done"} <= set(offered["wide"])  # the worker's own turn
    assert "add" not in offered["narrow"] and "worker_done" in offered["narrow"]
    workers = query(d, "SELECT label, parent_session FROM sessions WHERE kind = 'worker'")
    assert len(workers) == 2


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_server_that_is_down_fails_its_tools_not_the_turn(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    down = {"url": f"http://127.0.0.1:{free_port()}/mcp"}
    d = make_daemon(mcp_config(short_tmp / "d", down, timeout_s=4))
    async with await Adapter.connect(d, uniq("t")) as a:
        answer = await ask(a, uniq("+"), 'add {"a": 1, "b": 1}')
    assert answer.startswith("error:the MCP server 'calc' is not available (")


# Servers that speak something else than MCP: a program that answers every line with
# text, and an HTTP server that knows no MCP (it serves files, and refuses a POST).
CHATTY = [sys.executable, "-c", "import sys; [print('hello?', flush=True) for _ in sys.stdin]"]


@pytest.fixture
def plain_http() -> Iterator[str]:
    with serving(sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "{port}") as port:
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("speaks", ["stdio", "http"])
async def test_a_server_that_speaks_something_else_fails_its_tools_not_the_turn(
    make_daemon: DaemonFactory, short_tmp: Path, plain_http: str, speaks: str
) -> None:
    server = {"command": CHATTY} if speaks == "stdio" else {"url": plain_http}
    d = make_daemon(mcp_config(short_tmp / "d", server, timeout_s=4))
    sender = uniq("+")
    async with await Adapter.connect(d, uniq("t")) as a:
        first = await ask(a, sender, 'add {"a": 1, "b": 1}')
        second = await ask(a, sender, 'add {"a": 2, "b": 2}')
        offered = (await ask(a, sender, "tools?")).split()
    for answer in (first, second):
        assert answer.startswith("error:the MCP server 'calc' is not available ("), answer
    assert "agent_send" in offered  # the broker's own tools, still offered
    assert d.proc is not None and d.proc.poll() is None
    session = query(d, "SELECT label FROM sessions LIMIT 1")[0][0]
    assert [t["status"] for t in turns(d, session)] == ["completed"] * 3


def test_a_broker_tool_name_or_a_missing_command_is_refused_at_start(short_tmp: Path) -> None:
    config = short_tmp / "broker.toml"
    base = {"ledger": {"path": str(short_tmp / "l.db")}, "socket_path": str(short_tmp / "s")}
    clash = {"name": "calc", "allow": ["add", "agent_send"], **STDIO}
    write_config(config, {**base, "mcp": {"servers": [clash]}})
    done = brokerd_once(config)
    assert done.returncode == 78, done.stderr
    assert "'calc' allows the tool 'agent_send'" in done.stderr
    assert "broker's own tool 'agent_send'" in done.stderr
    missing = {"name": "calc", "allow": ["add"], "command": ["no-such-mcp-server"]}
    write_config(config, {**base, "mcp": {"servers": [missing]}})
    done = brokerd_once(config)
    assert done.returncode == 78 and "'no-such-mcp-server' is not found" in done.stderr


async def test_every_call_is_bounded_by_the_engine_timeout(anyio_backend: str) -> None:
    """In process, on asyncio and trio: the client session itself, over stdio."""
    import anyio

    from broker.config import Settings
    from broker.engines import EngineError
    from broker.mcp.tools import McpTools

    settings = Settings(
        mcp={"servers": [{"name": "calc", "allow": ["add", "slow"], **STDIO}]},
        engine={"timeout_s": 15},
    )
    hub = McpTools(settings)
    async with anyio.create_task_group() as tg:
        await tg.start(hub.run)
        with anyio.fail_after(30):  # the server's first start, on a busy machine
            await hub.links["calc"].up.wait()
        assert await hub.call("add", {"a": 1, "b": 2}, None) == "3"
        hub.timeout_s = 1.5
        with pytest.raises(EngineError, match=r"'slow' \(calc\) did not answer within 1.5 s"):
            await hub.call("slow", {}, frozenset({"calc"}))
        assert await hub.call("add", {"a": 2, "b": 2}, None) == "4"  # the session goes on
        with pytest.raises(EngineError, match="not offered to this session"):
            await hub.call("add", {"a": 2, "b": 2}, frozenset())
        tg.cancel_scope.cancel()
