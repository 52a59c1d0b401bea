"""`kind = "langgraph"` on the real daemon (docs/langgraph.md), a compiled graph on
LangChain's fake chat model (tests/integration/lg_agent.py): a plain reply streamed, the
graph's own tool, a broker tool (`agent_send` making a worker whose result comes back),
an interrupt that aborts the run, and a kill -9 mid-turn whose inputs run again once. No
checkpointer: the second turn's context comes from the ledger. LangGraph runs on
asyncio only here: the daemon refuses trio at start.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonFactory
from tests.harness import brokerd_once, write_config
from tests.integration.wire import Adapter, assert_run_once_in_order, query, turns, uniq

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]
HERE = Path(__file__).parent


def agents_daemon(make_daemon: DaemonFactory, short_tmp: Path, **engine: Any) -> Any:
    (short_tmp / "d").mkdir(exist_ok=True)
    shutil.copy(HERE / "lg_agent.py", short_tmp / "d" / "lg_agent.py")
    return make_daemon(
        {
            "engine": {"kind": "langgraph", "graph": "lg_agent:graph", **engine},
            "queue": {"debounce_ms": 0},
        }
    )


def events(d: Any, turn_id: str, kind: str) -> list[dict[str, Any]]:
    rows = query(d, "SELECT payload FROM turn_events WHERE turn_id = ? AND type = ? ORDER BY seq",
                 turn_id, kind)  # fmt: skip
    return [json.loads(r[0]) for r in rows]


async def test_a_reply_and_the_graphs_own_tool(make_daemon: DaemonFactory, short_tmp: Path) -> None:
    d = agents_daemon(make_daemon, short_tmp)
    sender = uniq("+")
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(uniq("m"), "hello", sender))["session"]
        streamed = await a.delta(session=session)
        hello = await a.deliver(session=session)
        await a.send_inbound(uniq("m"), "what is the weather", sender)
        weather = await a.deliver(session=session)
    assert streamed["text"] == "Hi"  # the fake model streams word by word
    assert (hello["status"], hello["text"]) == ("final", "Hi there: hello")
    assert weather["text"] == "tool said: sunny in Paris"
    first, second = turns(d, session)
    assert [e["prompt_tokens"] for e in events(d, first["id"], "llm")] == [11]
    assert len(events(d, second["id"], "llm")) == 2  # the tool call, then the answer
    (action,) = events(d, second["id"], "action")
    assert (action["tool"], action["status"], action["by"]) == ("get_weather", "ok", "langgraph")
    assert first["status"] == second["status"] == "completed"


async def test_a_broker_tool_makes_a_worker_whose_result_comes_back(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    d = agents_daemon(make_daemon, short_tmp)
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(uniq("m"), "please delegate", uniq("+")))["session"]
        sent = await a.deliver(session=session)
        back = await a.deliver(session=session, within=20)
    assert sent["text"].startswith("tool said: ") and "worker:" in sent["text"]
    assert back["text"] == "worker done: one two three"
    (spawned,) = query(d, "SELECT spawned_session FROM tool_calls WHERE name = 'agent_send'")
    assert spawned[0].startswith("worker:")
    (worker,) = turns(d, spawned[0])
    assert worker["status"] == "completed"


async def test_an_interrupt_aborts_the_run(make_daemon: DaemonFactory, short_tmp: Path) -> None:
    d = agents_daemon(make_daemon, short_tmp)
    sender = uniq("+")
    slow, then = uniq("m"), uniq("m")
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(slow, "slow", sender))["session"]
        assert (await a.delta(session=session))["text"] == "working"
        await a.send_inbound(then, "never mind", sender, mode="interrupt")
        told = await a.deliver(session=session, msg_id=then, status="final", within=10)
    assert told["text"] == "Hi there: never mind"
    cut, done = turns(d, session)
    assert (cut["status"], cut["reason"], cut["inputs"]) == ("aborted", "interrupt", [slow])
    assert done["status"] == "completed" and then in done["inputs"]


async def test_a_crash_mid_turn_runs_the_inputs_again_once(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    d = agents_daemon(make_daemon, short_tmp)
    slow, channel = uniq("m"), uniq("t")
    async with await Adapter.connect(d, channel) as a:
        session = (await a.send_inbound(slow, "slow", uniq("+")))["session"]
        assert (await a.delta(session=session))["text"] == "working"
    assert d.proc is not None
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    d.start()
    async with await Adapter.connect(d, channel) as a:
        told = await a.deliver(session=session, msg_id=slow, status="final", within=20)
    assert told["text"] == "working"
    cut, rerun = turns(d, session)
    assert (cut["status"], cut["reason"]) == ("aborted", "crash")
    assert (rerun["status"], rerun["inputs"]) == ("completed", [slow])
    assert_run_once_in_order(d, session, [slow])


def test_trio_and_a_graph_that_is_no_graph_are_refused_at_start(
    short_tmp: Path, anyio_backend: str
) -> None:
    shutil.copy(HERE / "lg_agent.py", short_tmp / "lg_agent.py")
    config = short_tmp / "broker.toml"
    base = {"ledger": {"path": str(short_tmp / "l.db")}, "socket_path": str(short_tmp / "s")}
    write_config(config, {**base, "engine": {"kind": "langgraph", "graph": "lg_agent:builder"}})
    done = brokerd_once(config)
    assert done.returncode == 78 and "engine.graph" in done.stderr, done.stderr
    assert "not a compiled LangGraph graph" in done.stderr
    write_config(config, {**base, "engine": {"kind": "langgraph", "graph": "lg_agent:graph"}})
    done = subprocess.run(
        [sys.executable, "-m", "broker", "--config", str(config), "--backend", "trio"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 78 and "needs --backend asyncio" in done.stderr
