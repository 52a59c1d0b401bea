"""Worker links and workers that take several turns (issue 21), and the handoff a
worker gets (issue 26), on the real daemon: `tool_calls.spawned_session`, the
worker's `spawn_tool_call_id`, `workers.list`, `brokerctl workers`, `worker_done`,
a worker that never reports, and a kill between `worker_done` and the parent's turn."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.ctl import in_process_async
from tests.integration.scripted import Scripted, call
from wire.client import BrokerError

pytestmark = pytest.mark.anyio


async def test_links_workers_list_and_the_handoff(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    s = Scripted(make_daemon, tmp_path, anyio_backend)
    first = await s.say(
        'event decision {"text": "meet in Oslo"}\n'
        + call("scratchpad_merge", patch={"city": "Oslo", "secret": "s3"}),
        "m1",
    )
    parent = str(first["session"])
    reply = await s.say(
        "\n".join(
            [
                call(
                    "agent_send",
                    task="plan the trip",
                    target={"kind": "new_session", "label_hint": "a1"},
                    scratchpad_keys=["city"],
                ),
                call("agent_send", task="never sent", scratchpad_keys=["nope"]),
            ]
        ),
        "m2",
    )
    sent, refused = str(reply["text"]).splitlines()
    assert sent.startswith("agent_send:ok:") and '"session":"worker:a1"' in sent
    assert refused.startswith("agent_send:error:") and "'nope'" in refused
    assert len(s.rows("SELECT 1 FROM dispatches")) == 1  # the refused one left nothing
    await s.until("SELECT 1 FROM dispatches WHERE status = 'completed'")
    (call_id, turn, spawned), *others = s.rows(
        "SELECT id, turn_id, spawned_session FROM tool_calls WHERE name = 'agent_send' ORDER BY seq"
    )
    assert spawned == "worker:a1" and [o[2] for o in others] == [None]
    assert s.rows("SELECT spawn_tool_call_id, parent_turn_id FROM sessions WHERE label = ?",
                  "worker:a1") == [(call_id, turn)]  # fmt: skip
    listed = await s.op("workers.list", session=parent)
    assert [{k: w[k] for k in ("session", "parent_turn", "spawn_tool_call_id", "status", "task")}
            for w in listed] == [
        {"session": "worker:a1", "parent_turn": turn, "spawn_tool_call_id": call_id,
         "status": "completed", "task": "plan the trip"}
    ]  # fmt: skip
    assert await s.op("workers.list", session=parent, turn=turn) == listed
    (other_turn,) = s.rows("SELECT turn_id FROM messages WHERE msg_id = 'm1'")[0]
    assert await s.op("workers.list", session=parent, turn=other_turn) == []
    for args, field in (({"session": "dm:nobody"}, "session"), ({"turn": "t-none"}, "turn")):
        with pytest.raises(BrokerError) as missing:
            await s.op("workers.list", **{"session": parent, **args})
        assert missing.value.code == "not_found" and missing.value.frame["field"] == field
    # The worker got the task, the parent's state record and the one entry it named.
    (task_request,) = s.requests("worker:a1")
    handed = task_request["inputs"][0]
    assert handed.startswith("plan the trip\n\n--- Handoff from " + parent)
    assert "meet in Oslo" in handed and '{"city":"Oslo"}' in handed and "s3" not in handed
    assert "worker_done" in task_request["tools"]
    assert s.rows("SELECT task FROM sessions WHERE label = 'worker:a1'") == [("plan the trip",)]
    shown = await in_process_async(
        "--config", str(s.d.config_path), "workers", parent, "--turn", turn
    )
    out = shown.stdout
    assert shown.returncode == 0 and "worker:a1" in out and "completed" in out


def chain(*steps: str, wait_s: float = 0.1) -> str:
    """A task whose every turn but the last sets a timer with the next one's text."""
    text = steps[-1]
    for step in reversed(steps[:-1]):
        text = step + "\n" + call("schedule", text=text, in_s=wait_s)
    return text


async def test_a_worker_runs_three_turns_then_reports(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    s = Scripted(make_daemon, tmp_path, anyio_backend)
    parent = str((await s.say("hi", "m1"))["session"])
    task = chain("step one", "step two", call("worker_done", result="all three done"))
    await s.op(
        "agent_send",
        op="dispatch",
        target={"kind": "new_session", "label_hint": "w3"},
        task=task,
        parent_session=parent,
    )
    found = await s.until(
        "SELECT output FROM turns WHERE session_label = ? AND type = 'worker_result'", parent
    )
    assert "[worker worker:w3 completed]" in found[0][0] and "all three done" in found[0][0]
    worker_turns = s.rows(
        "SELECT status FROM turns WHERE session_label = 'worker:w3' ORDER BY started_at"
    )
    assert worker_turns == [("completed",)] * 3
    await anyio.sleep(0.3)  # a late settle would queue a second result by now
    assert s.rows("SELECT count(*) FROM queue_items WHERE source = 'worker'") == [(1,)]
    assert s.rows("SELECT status FROM dispatches") == [("completed",)]
    again = await s.op(  # the same session, a task that reports in its first turn
        "agent_send",
        op="dispatch",
        target={"kind": "session", "session": "worker:w3"},
        task="just this",
        parent_session=parent,
    )
    assert again["session"] == "worker:w3"
    await s.until("SELECT 1 FROM turns WHERE type = 'worker_result' AND output LIKE '%just this%'")
    assert s.rows("SELECT count(*) FROM queue_items WHERE source = 'worker'") == [(2,)]


async def test_a_worker_that_never_reports_times_out_once(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    s = Scripted(make_daemon, tmp_path, anyio_backend, {"workers": {"timeout_s": 1.0}})
    parent = str((await s.say("hi", "m1"))["session"])
    # Every turn waits on a timer of its own, and none calls worker_done.
    tick = call("schedule", text="nothing yet", in_s=3600)
    task = call("schedule", text=tick, in_s=0.1, every_s=1)
    await s.op("agent_send", op="dispatch", target={"kind": "new_session"}, task=task,
               parent_session=parent)  # fmt: skip
    found = await s.until(
        "SELECT output FROM turns WHERE session_label = ? AND type = 'worker_result'", parent
    )
    assert "timed_out" in found[0][0]
    assert s.rows("SELECT status FROM dispatches") == [("timed_out",)]
    await s.until(
        "SELECT 1 FROM turns t JOIN sessions s ON s.label = t.session_label"
        " WHERE s.kind = 'worker' GROUP BY t.session_label HAVING count(*) >= 2"
    )
    await anyio.sleep(0.3)
    assert s.rows("SELECT count(*) FROM queue_items WHERE source = 'worker'") == [(1,)]


@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_kill_between_worker_done_and_the_parents_turn(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    s = Scripted(make_daemon, tmp_path, anyio_backend)
    parent = str((await s.say("hi", "m1"))["session"])
    reported = tmp_path / "reported"
    # The result holds the parent's turn (it sleeps the first time); the worker's turn
    # goes on after worker_done: the kill finds both turns running.
    result = f"done\nsleeponce {tmp_path / 'parent-slept'} 30"
    task = "\n".join(
        [call("worker_done", result=result), f"mark {reported}",
         f"sleeponce {tmp_path / 'worker-slept'} 30"]
    )  # fmt: skip
    await s.op("agent_send", op="dispatch", target={"kind": "new_session", "label_hint": "k"},
               task=task, parent_session=parent)  # fmt: skip
    with anyio.fail_after(15):
        while not (reported.exists() and (tmp_path / "parent-slept").exists()):  # noqa: ASYNC110
            await anyio.sleep(0.05)  # the engines are other processes
    assert s.rows("SELECT status FROM dispatches") == [("completed",)]
    s.d.kill()
    s.d.start()
    await s.until(
        "SELECT 1 FROM turns WHERE session_label = ? AND type = 'worker_result'"
        " AND status = 'completed'",
        parent,
        limit_s=30,
    )
    await s.until("SELECT 1 FROM turns WHERE session_label = 'worker:k' AND status = 'completed'")
    (rerun,) = [r for r in s.requests("worker:k")][-1:]
    assert rerun["inputs"] == s.requests("worker:k")[0]["inputs"]  # the turn ran again
    output = s.rows("SELECT output FROM turns WHERE session_label = 'worker:k'"
                    " AND status = 'completed'")[0][0]  # fmt: skip
    assert output.startswith("worker_done:error:") and "already ended" in output
    assert s.rows("SELECT count(*) FROM queue_items WHERE source = 'worker'") == [(1,)]
    # The parent's turn cut off by the kill (recorded as a plain aborted turn), then
    # its one worker_result turn.
    assert s.rows(
        "SELECT type, status, reason FROM turns WHERE session_label = ?"
        " AND (type = 'worker_result' OR reason = 'crash') ORDER BY started_at",
        parent,
    ) == [("turn", "aborted", "crash"), ("worker_result", "completed", None)]
    assert json.loads(json.dumps(s.rows("SELECT status FROM dispatches"))) == [["completed"]]
