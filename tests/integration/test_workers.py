"""Workers via agent_send: dispatch, exactly one result back, limits, timeouts, restarts."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from wire.client import BrokerClient, BrokerError

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def parent_session(d: DaemonProcess) -> str:
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        await c.send(
            {
                "type": "inbound",
                "req": "r",
                "msg_id": "p1",
                "sender_id": "+1",
                "peer_kind": "dm",
                "text": "hello",
                "queue_mode": "followup",
            }
        )
        with anyio.fail_after(10):
            return str((await c.recv())["session"])


def rows(d: DaemonProcess, sql: str, *args: object) -> list[tuple[Any, ...]]:
    with d.db() as db:
        return db.execute(sql, args).fetchall()


async def until(d: DaemonProcess, sql: str, *args: object, limit_s: float = 15) -> list[Any]:
    with anyio.fail_after(limit_s):
        while not (found := rows(d, sql, *args)):  # noqa: ASYNC110 - another process's ledger
            await anyio.sleep(0.05)
    return found


async def dispatch(d: DaemonProcess, **args: Any) -> dict[str, Any]:
    async with await BrokerClient.connect(d.socket) as op:
        result: dict[str, Any] = await op.op("agent_send", op="dispatch", **args)
        return result


async def test_result_comes_back_once(daemon: DaemonProcess) -> None:
    parent = await parent_session(daemon)
    done = await dispatch(
        daemon,
        target={"kind": "new_session", "label_hint": "w1"},
        task="count the stars",
        parent_session=parent,
    )
    assert done["session"] == "worker:w1"
    turns = await until(
        daemon,
        "SELECT output FROM turns WHERE session_label = ? AND type = 'worker_result'",
        parent,
    )
    assert "[worker worker:w1 completed]" in turns[0][0] and "count the stars" in turns[0][0]
    assert rows(daemon, "SELECT status, result_item_id IS NOT NULL FROM dispatches") == [
        ("completed", 1)
    ]
    async with await BrokerClient.connect(daemon.socket) as op:
        listed = {s["label"]: s for s in await op.op("sessions.list")}
    assert listed["worker:w1"]["parent"] == parent
    assert rows(daemon, "SELECT task_status FROM sessions WHERE label = 'worker:w1'") == [
        ("completed",)
    ]
    await anyio.sleep(0.5)
    assert len(rows(daemon, "SELECT 1 FROM queue_items WHERE source = 'worker'")) == 1


async def test_dispatch_to_an_existing_session_and_limits(make_daemon: DaemonFactory) -> None:
    d = make_daemon({"workers": {"max_children": 1}, "engine": {"chunks": 4, "delay_ms": 500}})
    parent = await parent_session(d)
    first = await dispatch(d, target={"kind": "new_session"}, task="slow", parent_session=parent)
    assert first["session"].startswith("worker:")
    with pytest.raises(BrokerError) as refused:
        await dispatch(d, target={"kind": "new_session"}, task="two", parent_session=parent)
    assert refused.value.code == "invalid" and "running workers" in str(refused.value)
    with pytest.raises(BrokerError) as missing:
        await dispatch(d, target={"kind": "session", "session": "dm:nope"}, task="x")
    assert missing.value.code == "not_found"
    onto = await dispatch(d, target={"kind": "session", "session": first["session"]}, task="more")
    assert onto["session"] == first["session"]


async def test_worker_that_times_out(make_daemon: DaemonFactory) -> None:
    d = make_daemon({"workers": {"timeout_s": 0.5}, "engine": {"chunks": 10, "delay_ms": 500}})
    parent = await parent_session(d)
    worker = await dispatch(
        d, target={"kind": "new_session"}, task="forever", parent_session=parent
    )
    found = await until(d, "SELECT status FROM dispatches WHERE status = 'timed_out'")
    assert found == [("timed_out",)]
    await until(
        d,
        "SELECT 1 FROM turns WHERE session_label = ? AND type = 'worker_result'"
        " AND output LIKE '%timed_out%'",
        parent,
    )
    # The worker's own turn ends after the timeout (about 5 s in); its commit, which
    # would queue a result, queues no second one.
    ended = "SELECT status FROM turns WHERE session_label = ? AND type != 'compaction'"
    assert await until(d, ended, worker["session"]) == [("completed",)]
    assert len(rows(d, "SELECT 1 FROM queue_items WHERE source = 'worker'")) == 1


async def test_result_exactly_once_across_a_kill(make_daemon: DaemonFactory) -> None:
    d = make_daemon({"engine": {"chunks": 10, "delay_ms": 200}})
    parent = await parent_session(d)
    await until(d, "SELECT 1 FROM turns WHERE session_label = ?", parent)
    await dispatch(
        d,
        target={"kind": "new_session", "label_hint": "k"},
        task="a b c d e",
        parent_session=parent,
    )
    await until(
        d, "SELECT 1 FROM queue_items WHERE session_label = 'worker:k' AND status = 'running'"
    )
    d.kill()  # mid-way through the worker's turn
    d.start()
    await until(
        d,
        "SELECT 1 FROM turns WHERE session_label = ? AND type = 'worker_result'",
        parent,
        limit_s=30,
    )
    assert rows(d, "SELECT reason FROM turns WHERE session_label = 'worker:k' ORDER BY started_at")[
        0
    ] == ("crash",)
    d.kill()  # and again after the result: nothing is sent twice
    d.start()
    await anyio.sleep(1)
    assert len(rows(d, "SELECT 1 FROM queue_items WHERE source = 'worker'")) == 1
    assert len(rows(d, "SELECT 1 FROM turns WHERE type = 'worker_result'")) == 1


ENGINE = textwrap.dedent("""
    import json, sys
    turn = json.loads(sys.stdin.readline())
    text = "\\n".join(m["content"] for m in turn["inputs"])
    if text.startswith("delegate:"):
        print(json.dumps({"type": "tool_call", "id": "c1", "name": "agent_send",
                          "arguments": {"task": text[9:].strip()}}), flush=True)
        result = json.loads(sys.stdin.readline())
        text = "dispatched " + result["content"]
    print(json.dumps({"type": "final", "text": text}), flush=True)
""")


async def test_engine_dispatches_with_the_tool(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    program = tmp_path / "engine.py"
    program.write_text(ENGINE)
    d = make_daemon({"engine": {"kind": "subprocess", "command": [sys.executable, str(program)]}})
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        await c.send(
            {
                "type": "inbound",
                "req": "r",
                "msg_id": "m",
                "sender_id": "+1",
                "peer_kind": "dm",
                "text": "delegate: sum 2 and 2",
            }
        )
        with anyio.fail_after(20):
            parent = (await c.recv())["session"]
            replies: list[str] = []
            while len(replies) < 2:
                frame = await c.recv()
                if frame["type"] == "deliver":
                    replies.append(frame["text"])
                    await c.send({"type": "delivered", "out_id": frame["out_id"]})
    assert replies[0].startswith("dispatched ") and '"dispatched":true' in replies[0]
    assert "[worker worker:" in replies[1] and "sum 2 and 2" in replies[1]
    calls = rows(d, "SELECT name, status FROM tool_calls")
    assert calls == [("agent_send", "ok")]
    assert rows(d, "SELECT parent_session FROM sessions WHERE kind = 'worker'") == [(parent,)]
