"""The agent's own tools on the real daemon (issue 26): scratchpad_get/merge and the
scratchpad in the context, schedule, session_compact and the compaction model, and
`brokerctl compact` / `brokerctl scratchpad`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import pytest

from tests import ledger_checks as lc
from tests.conftest import DaemonFactory
from tests.ctl import in_process
from tests.integration.scripted import Scripted, call
from wire.client import BrokerError

pytestmark = pytest.mark.anyio


def results(reply: dict[str, object]) -> list[tuple[str, str, str]]:
    """The scripted engine's reply: (tool, status, content) per call."""
    lines = str(reply["text"]).splitlines()
    return [tuple(line.split(":", 2)) for line in lines]  # type: ignore[misc]


def pad_shown(request: dict[str, object]) -> list[str]:
    history = request["history"]
    assert isinstance(history, list)
    return [m["content"] for m in history if m["content"].startswith("Your scratchpad")]


async def test_scratchpad_tools_and_the_pad_in_the_context(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    # Room in the window for a message that carries a patch over the pad's limit.
    s = Scripted(make_daemon, tmp_path, anyio_backend, {"engine": {"context_window": 32768}})
    first = await s.say(
        "\n".join(
            [
                call("scratchpad_merge", patch={"plan": {"step": 1}, "city": "Oslo"}),
                call("scratchpad_merge", patch={"plan": {"done": True}, "city": None}),
                call("scratchpad_get"),
                call("scratchpad_merge", patch=5),
                call("scratchpad_merge", patch={"big": "x" * 70_000}),
            ]
        ),
        "m1",
    )
    session = str(first["session"])
    got = results(first)
    assert len(got) == 5, first["text"]
    assert [(name, status) for name, status, _ in got] == [
        ("scratchpad_merge", "ok"),
        ("scratchpad_merge", "ok"),
        ("scratchpad_get", "ok"),
        ("scratchpad_merge", "error"),
        ("scratchpad_merge", "error"),
    ]
    assert json.loads(got[2][2]) == {"plan": {"step": 1, "done": True}}
    assert "object" in got[3][2] and "at most 65536" in got[4][2]
    assert await s.op("scratchpad.get", session=session) == {"plan": {"step": 1, "done": True}}
    # The next turn shows the pad; an operator's merge shows in the turn after it.
    await s.say("hello", "m2")
    await s.op("scratchpad.merge", session=session, patch={"plan": None, "note": "from ops"})
    await s.say("again", "m3")
    shown = [pad_shown(r) for r in s.requests(session)]
    assert shown[0] == []
    assert shown[1] == [
        "Your scratchpad (your own notes; change them with scratchpad_merge):\n"
        '{"plan":{"done":true,"step":1}}'
    ]
    assert shown[2] and '{"note":"from ops"}' in shown[2][0]
    with pytest.raises(BrokerError) as refused:
        await s.op("scratchpad.merge", session=session, patch={"big": "x" * 70_000})
    assert refused.value.code == "invalid" and refused.value.frame.get("field") == "patch"
    assert await s.op("scratchpad.get", session=session) == {"note": "from ops"}


async def test_a_large_scratchpad_leaves_room_in_a_tiny_window(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    small = {"context_window": 256, "reserve_reply_tokens": 32}
    s = Scripted(make_daemon, tmp_path, anyio_backend, {"engine": small})
    session = str((await s.say("hi", "m1"))["session"])
    pad = {f"key{n}": f"value number {n}" for n in range(40)}
    await s.op("scratchpad.merge", session=session, patch=pad)
    reply = await s.say("what is in my notes", "m2")
    assert reply["status"] == "final" and reply["text"] == "what is in my notes"
    shown = pad_shown(s.requests(session)[-1])
    assert shown == [
        "Your scratchpad has 40 entries (key0, key1, key10, key11, key12 and 35"
        " more): read them with scratchpad_get."
    ]
    assert "value number" not in shown[0]


async def test_schedule_tool_adds_a_timer_that_fires_into_the_session(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    s = Scripted(make_daemon, tmp_path, anyio_backend)
    reply = await s.say(
        "\n".join(
            [
                call("schedule", text="in one", in_s=5, every_s=0.5),
                call("schedule", text="in two"),
                call("schedule", text="wake up", in_s=0.2),
            ]
        ),
        "m1",
    )
    session = str(reply["session"])
    got = results(reply)
    assert [status for _, status, _ in got] == ["error", "error", "ok"]
    assert "(every_s)" in got[0][2] and "(in_s)" in got[1][2]
    assert s.rows("SELECT text FROM timers") == [("wake up",)]
    # The wheel was told: the timer fires at once, not at the wheel's next minute.
    with anyio.fail_after(5):
        while not any(r["inputs"] == ["wake up"] for r in s.requests(session)):  # noqa: ASYNC110
            await anyio.sleep(0.05)  # another process's log file
    await s.until("SELECT 1 FROM queue_items WHERE source = 'timer' AND status = 'done'")


async def test_session_compact_runs_after_the_turn_with_the_compaction_model(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    s = Scripted(make_daemon, tmp_path, anyio_backend, {"engine": {"compaction_model": "cheap"}})
    await s.say("my name is Ann", "m1")
    await s.say("I live in Oslo", "m2")
    reply = await s.say(call("session_compact", focus="keep the names") + "\nsleep 0.3", "m3")
    session = str(reply["session"])
    assert results(reply)[0][:2] == ("session_compact", "ok")
    found = await s.until("SELECT turn_id, instructions, trigger FROM compactions")
    assert [row[1:] for row in found] == [("keep the names", "manual")]
    asked = s.rows(
        "SELECT t.id, t.completed_at FROM turns t JOIN messages m ON m.turn_id = t.id"
        " WHERE m.content LIKE 'call session_compact%'"
    )
    (compaction_started,) = s.rows("SELECT started_at FROM turns WHERE type = 'compaction'")[0]
    assert compaction_started >= asked[0][1]  # after the turn that asked, never beside it
    with s.d.db() as db:
        view = lc.load(db)
    assert lc.check_no_overlap(view) + lc.check_serial_turns(view) == []
    requests = s.requests(session)
    summarizer = [r for r in requests if "compact a conversation" in (r["system"] or "")]
    assert [r["model"] for r in summarizer] == ["cheap"]
    assert summarizer[0]["tools"] == [] and "keep the names" in summarizer[0]["inputs"][0]
    turns = [r for r in requests if r not in summarizer]
    assert len(turns) == 3 and {r["model"] for r in turns} == {None}
    assert "session_compact" in turns[0]["tools"] and "worker_done" not in turns[0]["tools"]


async def test_brokerctl_compact_and_scratchpad(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    s = Scripted(make_daemon, tmp_path, anyio_backend)
    session = str((await s.say("first thing", "m1"))["session"])
    await s.say("second thing", "m2")

    def ctl(*args: str) -> subprocess.CompletedProcess[str]:
        return in_process("--config", str(s.d.config_path), *args)

    merged = ctl("scratchpad", session, "--merge", '{"todo": ["a", "b"]}')
    assert merged.returncode == 0 and json.loads(merged.stdout) == {"todo": ["a", "b"]}
    assert json.loads(ctl("scratchpad", session).stdout) == {"todo": ["a", "b"]}
    assert ctl("scratchpad", session, "--merge", "[1]").returncode == 64
    missing = ctl("scratchpad", "dm:nobody")
    assert missing.returncode == 1 and "not_found" in missing.stderr
    done = ctl("compact", session, "--focus", "the things")
    assert done.returncode == 0 and "compaction turn" in done.stdout, done.stderr
    assert s.rows("SELECT instructions FROM compactions") == [("the things",)]
    assert ctl("--json", "workers", session).stdout.strip() == "[]"
