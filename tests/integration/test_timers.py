"""Timers on the real daemon: the ops and `brokerctl timers`, firings into turns,
replies to the conversation last heard from (or none), system sessions, and due
times missed while the daemon was down."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import anyio
import orjson
import pytest

from tests.ctl import in_process
from tests.harness import DaemonProcess
from wire.client import BrokerClient, BrokerError

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


def rows(d: DaemonProcess, sql: str, *args: object) -> list[tuple[Any, ...]]:
    with d.db() as db:
        return db.execute(sql, args).fetchall()


async def until(d: DaemonProcess, sql: str, *args: object, limit_s: float = 10) -> list[Any]:
    with anyio.fail_after(limit_s):
        while not (found := rows(d, sql, *args)):  # noqa: ASYNC110 - another process's ledger
            await anyio.sleep(0.05)
    return found


def ctl(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return in_process("--config", str(d.config_path), *args)


async def op(d: DaemonProcess, name: str, **args: Any) -> Any:
    async with await BrokerClient.connect(d.socket) as c:
        return await c.op(name, **args)


async def person_session(c: BrokerClient, msg_id: str = "p1", text: str = "hello") -> str:
    """One message from +1 on sms, its reply confirmed; the session's label."""
    await c.send(
        {
            "type": "inbound",
            "req": msg_id,
            "msg_id": msg_id,
            "sender_id": "+1",
            "peer_kind": "dm",
            "text": text,
            "queue_mode": "followup",
        }
    )
    session = ""
    with anyio.fail_after(10):
        while (frame := await c.recv())["type"] != "deliver":
            session = frame.get("session", session)
    await c.send({"type": "delivered", "out_id": frame["out_id"]})
    return session


async def test_ops_add_list_and_cancel(any_backend_daemon: DaemonProcess) -> None:
    d = any_backend_daemon
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        label = await person_session(c)
    before = time.time() * 1000
    once = await op(d, "timer.add", session=label, text="once", in_s=600)
    assert set(once) == {"timer", "next_at"}
    assert before + 600_000 <= once["next_at"] <= time.time() * 1000 + 600_000
    later = await op(
        d, "timer.add", session=label, text="daily", at="2099-01-01T09:00:00+01:00", every_s=86400
    )
    assert later["next_at"] == 4_070_937_600_000
    beat = await op(d, "timer.add", session="system:heartbeat", text="beat", in_s=900, every_s=60)
    listed = await op(d, "timer.list")
    assert [(t["timer"], t["session"], t["text"], t["every_s"], t["fired"]) for t in listed] == [
        (once["timer"], label, "once", None, 0),
        (beat["timer"], "system:heartbeat", "beat", 60.0, 0),
        (later["timer"], label, "daily", 86400.0, 0),
    ]
    assert [t["timer"] for t in await op(d, "timer.list", session=label)] == [
        once["timer"],
        later["timer"],
    ]
    assert await op(d, "timer.cancel", timer=once["timer"]) == {
        "timer": once["timer"],
        "status": "cancelled",
    }
    assert [t["timer"] for t in await op(d, "timer.list", session=label)] == [later["timer"]]
    shown = await op(d, "session.show", session="system:heartbeat")
    assert (shown["kind"], shown["origin"]) == ("system", "operator")


BAD_ADDS: list[tuple[dict[str, Any], str, str]] = [
    ({"session": "dm:ent_nobody", "text": "x", "in_s": 1}, "not_found", "session"),
    ({"session": "heartbeat", "text": "x", "in_s": 1}, "not_found", "session"),
    ({"session": "system:hb", "text": "x"}, "invalid", "in_s"),
    (
        {"session": "system:hb", "text": "x", "in_s": 1, "at": "2099-01-01T00:00:00Z"},
        "invalid",
        "in_s",
    ),
    ({"session": "system:hb", "text": "x", "in_s": -1}, "invalid", "in_s"),
    ({"session": "system:hb", "text": "x", "in_s": 1, "every_s": 0.5}, "invalid", "every_s"),
    ({"session": "system:hb", "text": "x", "in_s": 1, "every_s": -5}, "invalid", "every_s"),
    ({"session": "system:hb", "text": "x", "at": "next tuesday"}, "invalid", "at"),
    ({"session": "system:hb", "text": "x", "at": "2099-01-01T00:00:00"}, "invalid", "at"),
    ({"session": "system:hb", "in_s": 1}, "invalid", "text"),
]


async def test_bad_timer_input_is_refused_and_changes_nothing(daemon: DaemonProcess) -> None:
    for args, code, field in BAD_ADDS:
        with pytest.raises(BrokerError) as caught:
            await op(daemon, "timer.add", **args)
        assert (caught.value.code, caught.value.frame.get("field")) == (code, field), args
    with pytest.raises(BrokerError) as cancelled:
        await op(daemon, "timer.cancel", timer="tmr_nothing")
    assert (cancelled.value.code, cancelled.value.frame.get("field")) == ("not_found", "timer")
    with pytest.raises(BrokerError) as listed:
        await op(daemon, "timer.list", session="dm:ent_nobody")
    assert listed.value.code == "not_found"
    assert rows(daemon, "SELECT count(*) FROM timers") == [(0,)]
    assert rows(daemon, "SELECT label FROM sessions") == []
    assert (await op(daemon, "health"))["ok"] is True  # and it goes on serving


async def test_a_firing_runs_a_turn_whose_reply_goes_to_the_last_conversation(
    any_backend_daemon: DaemonProcess,
) -> None:
    d = any_backend_daemon
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        label = await person_session(c)
        timer = (await op(d, "timer.add", session=label, text="time to stretch", in_s=0.2))["timer"]
        with anyio.fail_after(10):
            while (frame := await c.recv())["type"] != "deliver":
                pass
        await c.send({"type": "delivered", "out_id": frame["out_id"]})
    assert (frame["session"], frame["peer_id"], frame["text"]) == (label, "+1", "time to stretch")
    assert frame["status"] == "final"
    done = await until(
        d, "SELECT status FROM queue_items WHERE source = 'timer' AND status = 'done'"
    )
    assert done == [("done",)]
    (payload, mode) = rows(d, "SELECT payload, mode FROM queue_items WHERE source = 'timer'")[0]
    assert orjson.loads(payload)["msg_id"] == f"timer:{timer}:1" and mode == "followup"
    assert rows(d, "SELECT msg_id, n FROM timer_firings") == [(f"timer:{timer}:1", 1)]
    assert await op(d, "timer.list") == []  # a one-shot timer that fired is done


async def test_a_system_session_s_replies_stay_in_the_ledger(
    any_backend_daemon: DaemonProcess,
) -> None:
    d = any_backend_daemon
    timer = (await op(d, "timer.add", session="system:heartbeat", text="beat", in_s=0, every_s=1))[
        "timer"
    ]
    await until(
        d,
        "SELECT 1 FROM turns WHERE session_label = 'system:heartbeat' AND status = 'completed'"
        " GROUP BY session_label HAVING count(*) >= 2",
    )
    await op(d, "timer.cancel", timer=timer)
    outputs = rows(d, "SELECT output FROM turns WHERE session_label = 'system:heartbeat'")
    assert outputs and all(o == ("beat",) for o in outputs)
    assert rows(d, "SELECT count(*) FROM outbox") == [(0,)]  # no conversation: no delivery
    fired = rows(d, "SELECT n FROM timer_firings ORDER BY n")
    assert [n for (n,) in fired] == list(range(1, len(fired) + 1))
    shown = await op(d, "session.show", session="system:heartbeat")
    assert shown["kind"] == "system"


async def test_an_at_in_the_past_fires_once_and_keeps_its_grid(daemon: DaemonProcess) -> None:
    now_s = time.time()
    two_hours_ago = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_s - 7200))
    added = await op(
        daemon, "timer.add", session="system:digest", text="digest", at=two_hours_ago, every_s=600
    )
    await until(daemon, "SELECT 1 FROM timer_firings")
    await anyio.sleep(0.3)
    assert [n for (n,) in rows(daemon, "SELECT n FROM timer_firings")] == [1]
    (listed,) = await op(daemon, "timer.list")
    assert listed["fired"] == 1
    assert (listed["next_at"] - added["next_at"]) % 600_000 == 0
    assert now_s * 1000 < listed["next_at"] <= now_s * 1000 + 600_000


async def test_a_due_time_missed_while_down_fires_once_at_start(daemon: DaemonProcess) -> None:
    added = await op(daemon, "timer.add", session="system:hb", text="beat", in_s=0.5, every_s=1)
    daemon.kill()  # before its first due time
    await anyio.sleep(3.2)  # three due times pass with no daemon
    restarted_ms = time.time() * 1000
    daemon.start()
    fired = await until(
        daemon, "SELECT n, due_at, fired_at FROM timer_firings WHERE n >= 2 ORDER BY n"
    )
    firings = rows(daemon, "SELECT n, due_at, fired_at FROM timer_firings ORDER BY n")
    # The first firing stands for every missed due time; the next is on the grid
    # after the restart, not one of the missed ones.
    assert firings[0][:2] == (1, added["next_at"]) and firings[0][2] >= restarted_ms
    assert fired[0][0] == 2 and fired[0][1] > restarted_ms
    assert (fired[0][1] - added["next_at"]) % 1000 == 0


async def test_brokerctl_timers(daemon: DaemonProcess) -> None:
    added = ctl(
        daemon, "--json", "timers", "add", "system:hb", "beat", "--in", "600", "--every", "60"
    )
    assert added.returncode == 0, added.stderr
    timer = orjson.loads(added.stdout)["timer"]
    plain = ctl(daemon, "timers", "add", "system:hb", "later", "--at", "2099-01-01T00:00:00Z")
    assert plain.returncode == 0 and "next at 2099-01-01T00:00:00.000+00:00" in plain.stdout
    listed = ctl(daemon, "--json", "timers", "system:hb")
    assert [t["text"] for t in orjson.loads(listed.stdout)] == ["beat", "later"]
    table = ctl(daemon, "timers")
    assert table.returncode == 0 and "system:hb" in table.stdout and "later" in table.stdout
    cancelled = ctl(daemon, "timers", "cancel", timer)
    assert cancelled.returncode == 0 and f"timer {timer}: cancelled" in cancelled.stdout
    again = ctl(daemon, "timers", "cancel", timer)
    assert again.returncode == 1 and "not_found" in again.stderr
    bad = ctl(daemon, "timers", "add", "system:hb", "beat", "--in", "1", "--every", "0.5")
    assert bad.returncode == 1 and "invalid" in bad.stderr and "every_s" in bad.stderr
    usage = ctl(daemon, "timers", "add", "system:hb")
    assert usage.returncode == 64 and "usage" in usage.stderr
    assert [t["text"] for t in orjson.loads(ctl(daemon, "--json", "timers").stdout)] == ["later"]
