"""The framework engines on the real daemon, one scenario written once for all three
(docs/agents-sdk.md, docs/langgraph.md, docs/adk.md): `openai-agents` on the SDK's own
fake model (sdk_agent.py), `langgraph` on LangChain's fake chat model (lg_agent.py, the
graph of examples/agent_langgraph.py), `adk` on ADK's `BaseLlm` (adk_agent.py).

Each kind: a plain reply streamed, the agent's own tool, a broker tool (`agent_send`
making a worker whose result comes back), a message steered in during a tool call that
reaches the next model call of the same turn, an interrupt that aborts the run, and a
kill -9 mid-turn whose inputs run again once; the Agents SDK's handoff besides. No
framework session store: the second turn's context comes from the ledger. The three
SDKs run on asyncio only: a daemon with one of them refuses trio at start. Tests that
neither kill their daemon nor need a fresh ledger share one daemon per kind (`shared`).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess, brokerd_once, write_config
from tests.integration.wire import (
    Adapter,
    assert_run_once_in_order,
    items,
    query,
    turns,
    uniq,
    wait_until,
)

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]
HERE = Path(__file__).parent
REPO = HERE.parent.parent
START_S = 120  # a start that imports a framework, on a machine under load


@dataclass(frozen=True)
class Kind:
    kind: str
    key: str  # the engine's config key naming the agent
    entry: str
    files: tuple[Path, ...]  # copied into the daemon's folder
    first_delta: str  # what the reply "Hi there: hello" streams first
    llm_calls_of_a_tool_round: int | None  # `llm` events of a turn with one tool call
    not_an_agent: str  # the start error for an entry that is a function
    refused: str


KINDS = {
    k.kind: k
    for k in (
        Kind("openai-agents", "agent", "sdk_agent:agent", (HERE / "sdk_agent.py",),
             "Hi there: hello", 2, "sdk_agent:get_weather", "not an agents.Agent"),
        Kind("langgraph", "graph", "lg_agent:graph",
             (HERE / "lg_agent.py", REPO / "examples" / "agent_langgraph.py"),
             "Hi", 2, "lg_agent:get_weather", "not a compiled LangGraph graph"),
        Kind("adk", "agent", "adk_agent:root_agent", (HERE / "adk_agent.py",),
             "Hi there: hello", None, "adk_agent:get_weather", "not a google.adk agent"),
    )
}  # fmt: skip
each_kind = pytest.mark.parametrize("kind", list(KINDS))


def place(kind: Kind, folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    for path in (*kind.files, HERE / "agent_rules.py"):
        shutil.copy(path, folder / path.name)


def framework_daemon(make_daemon: DaemonFactory, short_tmp: Path, kind: str) -> DaemonProcess:
    k = KINDS[kind]
    place(k, short_tmp / "d")
    return make_daemon(
        {"engine": {"kind": k.kind, k.key: k.entry}, "queue": {"debounce_ms": 0}},
    )


@pytest.fixture(scope="module")
def shared() -> Iterator[Callable[[str], DaemonProcess]]:
    """One daemon per kind for the module's tests that neither kill it nor need its
    ledger fresh (a framework's import is most of a start's CPU); started on first use.
    Each test has its own senders, so its own sessions."""
    started: dict[str, DaemonProcess] = {}
    work = Path(tempfile.mkdtemp(prefix="brk-fw-", dir="/tmp"))

    def daemon(kind: str) -> DaemonProcess:
        if kind not in started:
            k = KINDS[kind]
            folder = work / kind
            place(k, folder)
            config = {"engine": {"kind": k.kind, k.key: k.entry}, "queue": {"debounce_ms": 0}}
            started[kind] = DaemonProcess(folder, config).start(START_S)
        return started[kind]

    try:
        yield daemon
    finally:
        for d in started.values():
            d.kill()
        shutil.rmtree(work, ignore_errors=True)


def events(d: DaemonProcess, turn_id: str, kind: str) -> list[dict[str, Any]]:
    rows = query(d, "SELECT payload FROM turn_events WHERE turn_id = ? AND type = ? ORDER BY seq",
                 turn_id, kind)  # fmt: skip
    return [json.loads(r[0]) for r in rows]


@each_kind
async def test_a_reply_and_the_agents_own_tool(
    shared: Callable[[str], DaemonProcess], kind: str
) -> None:
    d = shared(kind)
    sender = uniq("+")
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(uniq("m"), "hello", sender))["session"]
        streamed = await a.delta(session=session)
        hello = await a.deliver(session=session)
        await a.send_inbound(uniq("m"), "what is the weather", sender)
        weather = await a.deliver(session=session)
    assert streamed["text"] == KINDS[kind].first_delta
    assert (hello["status"], hello["text"]) == ("final", "Hi there: hello")
    assert weather["text"] == "tool said: sunny in Paris"
    first, second = turns(d, session)
    assert [e["prompt_tokens"] for e in events(d, first["id"], "llm")] == [11]
    calls = KINDS[kind].llm_calls_of_a_tool_round
    if calls is not None:  # the tool call, then the answer
        assert len(events(d, second["id"], "llm")) == calls
    (action,) = events(d, second["id"], "action")
    assert (action["tool"], action["status"], action["by"]) == ("get_weather", "ok", kind)
    assert first["status"] == second["status"] == "completed"


async def test_an_agents_sdk_handoff(shared: Callable[[str], DaemonProcess]) -> None:
    d = shared("openai-agents")
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(uniq("m"), "spanish please", uniq("+")))["session"]
        spanish = await a.deliver(session=session)
    assert spanish["text"] == "hola"
    (turn,) = turns(d, session)
    (decision,) = events(d, turn["id"], "decision")
    assert decision["text"] == "handed off from helper to spanish"


@each_kind
async def test_a_broker_tool_makes_a_worker_whose_result_comes_back(
    shared: Callable[[str], DaemonProcess], kind: str
) -> None:
    d = shared(kind)
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(uniq("m"), "please delegate", uniq("+")))["session"]
        sent = await a.deliver(session=session)
        back = await a.deliver(session=session, within=20)
    assert sent["text"].startswith("tool said: ") and "worker:" in sent["text"]
    assert back["text"] == "worker done: one two three"
    (spawned,) = query(
        d,
        "SELECT c.spawned_session FROM tool_calls c JOIN turns t ON t.id = c.turn_id"
        " WHERE c.name = 'agent_send' AND t.session_label = ?",
        session,
    )
    assert spawned[0].startswith("worker:")
    (worker,) = turns(d, spawned[0])
    assert worker["status"] == "completed"


@each_kind
async def test_a_message_steered_during_a_tool_call_reaches_the_next_model_call(
    shared: Callable[[str], DaemonProcess], kind: str
) -> None:
    d = shared(kind)
    sender = uniq("+")
    held, steered, status = uniq("m"), uniq("m"), uniq("m")
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(held, "hold the line", sender))["session"]

        async def holding() -> bool:
            return (d.workdir / "holding").exists()

        await wait_until(holding, "the agent's tool `hold` running")
        await a.send_inbound(steered, "also in Rome", sender, mode="steer")
        # The session's actor takes its messages in order: once /status is answered,
        # the steered message is with the running turn.
        await a.send_inbound(status, "/status", sender)
        await a.deliver(session=session, msg_id=status)
        (d.workdir / "release").write_text("go")
        reply = await a.deliver(session=session, msg_id=held, status="final")
        extra = [f for f in await a.read_for(0.25) if f.get("type") == "deliver"]
    assert reply["text"] == "heard: also in Rome"
    assert reply["in_reply_to"] == [held, steered]
    assert extra == []
    (turn,) = turns(d, session)
    assert turn["status"] == "completed" and turn["inputs"] == [held, steered]
    assert items(d, session)[steered] == ("done", None, turn["id"])
    calls = KINDS[kind].llm_calls_of_a_tool_round
    if calls is not None:  # the tool call, then the steered answer
        assert len(events(d, turn["id"], "llm")) == calls
    assert_run_once_in_order(d, session, [held, steered])


@each_kind
async def test_an_interrupt_aborts_the_run(
    shared: Callable[[str], DaemonProcess], kind: str
) -> None:
    d = shared(kind)
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


@each_kind
async def test_a_crash_mid_turn_runs_the_inputs_again_once(
    make_daemon: DaemonFactory, short_tmp: Path, kind: str
) -> None:
    d = framework_daemon(make_daemon, short_tmp, kind)
    slow, channel = uniq("m"), uniq("t")
    async with await Adapter.connect(d, channel) as a:
        session = (await a.send_inbound(slow, "slow", uniq("+")))["session"]
        assert (await a.delta(session=session))["text"] == "working"

    # The turn's `running` mark is queued on the writer, not waited for
    # (broker/mailbox/session_ports.py): a kill before it commits leaves no cut turn.
    async def marked() -> bool:
        return any(status == "running" for status, _, _ in items(d, session).values())

    await wait_until(marked, f"a turn of {session} marked running")
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


@each_kind
def test_trio_an_entry_that_is_no_agent_and_one_that_raises_are_refused_at_start(
    short_tmp: Path, anyio_backend: str, kind: str
) -> None:
    k = KINDS[kind]
    place(k, short_tmp)
    config = short_tmp / "broker.toml"
    base = {"ledger": {"path": str(short_tmp / "l.db")}, "socket_path": str(short_tmp / "s")}
    write_config(config, {**base, "engine": {"kind": kind, k.key: k.not_an_agent}})
    done = brokerd_once(config, timeout=START_S)
    assert done.returncode == 78 and f"engine.{k.key}" in done.stderr, done.stderr
    assert k.refused in done.stderr
    (short_tmp / "raising.py").write_text("raise RuntimeError('no API key')\n")
    write_config(config, {**base, "engine": {"kind": kind, k.key: "raising:agent"}})
    done = brokerd_once(config, timeout=START_S)
    assert done.returncode == 78 and f"engine.{k.key}" in done.stderr, done.stderr
    assert "importing raising failed: RuntimeError: no API key" in done.stderr
    assert "Traceback" not in done.stderr
    write_config(config, {**base, "engine": {"kind": kind, k.key: k.entry}})
    done = subprocess.run(
        [sys.executable, "-m", "broker", "--config", str(config), "--backend", "trio"],
        capture_output=True, text=True, timeout=START_S,
    )  # fmt: skip
    assert done.returncode == 78 and "needs --backend asyncio" in done.stderr
