"""Sessions that end, on the real daemon (asyncio and trio): `session.close` and
`brokerctl close`, a session closing by itself after a person's silence
(`[closing] idle_s`), the successor a closed DM session's next message opens (its
reply comes from there, and `session.show` names the old one), a close refused
while a turn runs, bad closes changing nothing, and a session's title and slug
from its first message in `session.show`."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.ctl import in_process
from tests.harness import DaemonProcess
from tests.integration.wire import Adapter, op, uniq, wait_until
from wire.client import BrokerError

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]
QUIET = {"log_level": "warning", "queue": {"idle_stop_s": 5.0}}


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    """The daemon's event loop: every test runs against both."""
    return str(request.param)


def ctl(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return in_process("--config", str(d.config_path), *args)


async def say(a: Adapter, sender: str, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Send a DM, wait for its final reply and confirm it; (the ack, the reply)."""
    msg_id = uniq("m")
    ack = await a.send_inbound(msg_id, text, sender)
    reply = await a.deliver(msg_id=msg_id, status="final")
    await a.confirm(reply["out_id"])
    return ack, reply


async def test_a_closed_dm_goes_on_in_a_session_extending_it(
    make_daemon: DaemonFactory, backend: str
) -> None:
    d = make_daemon(QUIET, backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        first, _ = await say(a, "+1", "Plan the trip to Lisbon")
        old = first["session"]
        closed = await op(d, "session.close", session=old)
        assert closed["source"] == "mechanical"
        assert closed["closing_summary"] == "Closed after 1 turn(s): Plan the trip to Lisbon."
        ack, reply = await say(a, "+1", "I am back")
        new = ack["session"]
        assert new == f"{old}~2" and reply["session"] == new
        shown = await op(d, "session.show", session=new)
        assert (shown["extends"], shown["status"], shown["kind"]) == (old, "active", "dm")
        assert [t["title"] for t in shown["turns"]] == ["I am back"]
        before = await op(d, "session.show", session=old)
        assert (before["status"], len(before["turns"])) == ("closed", 1)
        assert before["closing_summary"] == closed["closing_summary"]
        assert (before["title"], before["slug"]) == (
            "Plan the trip to Lisbon",
            "plan-the-trip-to-lisbon",
        )
        again, _ = await say(a, "+1", "still here")
        assert again["session"] == new
        _, refused = await say(a, "+1", f"/switch {old}")  # no going back into it
        assert refused["text"] == f"{old} is closed: it takes no more work."
        again, _ = await say(a, "+1", "and on")
        assert again["session"] == new
        other, _ = await say(a, "+2", "hello")  # someone else's session is their own
        assert other["session"] not in (old, new)


async def test_a_session_a_person_left_closes_by_itself(
    make_daemon: DaemonFactory, backend: str, short_tmp: Path
) -> None:
    # [closing] idle_s on the daemon's own clock: kept short, and waited for by
    # polling, never by a sleep. +2's route gives a persona that never closes.
    policies = short_tmp / "closing-rules.toml"
    policies.write_text(
        '[[rules]]\nname = "keep"\nmatch = { sender = ["+2"] }\nsession = { persona = "keeper" }\n'
    )
    d = make_daemon(
        {
            **QUIET,
            "policies_file": str(policies),
            "personas": {"keeper": {"close_idle_s": 0}},
            "closing": {"idle_s": 0.5, "every_s": 0.1},
        },
        backend=backend,
    )
    async with await Adapter.connect(d, "sms") as a:
        kept, _ = await say(a, "+2", "I stay")
        first, _ = await say(a, "+1", "Plan the trip to Lisbon")
        old = first["session"]

        async def closed() -> bool:
            return bool((await op(d, "session.show", session=old))["status"] == "closed")

        await wait_until(closed, "the idle session closes by itself")
        shown = await op(d, "session.show", session=old)
        assert shown["closing_summary"] == "Closed after 1 turn(s): Plan the trip to Lisbon."
        assert shown["ended_at"] is not None and len(shown["turns"]) == 1
        assert (await op(d, "session.show", session=kept["session"]))["status"] == "active"
        ack, reply = await say(a, "+1", "I am back")
        assert ack["session"] == f"{old}~2" and reply["session"] == f"{old}~2"
        assert (await op(d, "session.show", session=f"{old}~2"))["extends"] == old


async def test_close_refuses_while_a_turn_runs(make_daemon: DaemonFactory, backend: str) -> None:
    d = make_daemon({**QUIET, "engine": {"delay_ms": 400, "chunks": 2}}, backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        msg_id = uniq("m")
        ack = await a.send_inbound(msg_id, "a slow one", "+1")
        session = ack["session"]

        async def running() -> bool:
            shown = await op(d, "session.show", session=session)
            return any(q["status"] == "running" for q in shown["queued"])

        await wait_until(running, "the turn runs")
        with pytest.raises(BrokerError) as refused:
            await op(d, "session.close", session=session, summary="too soon")
        assert refused.value.code == "conflict"
        assert "1 running item" in str(refused.value.frame.get("message"))
        reply = await a.deliver(msg_id=msg_id, status="final")
        await a.confirm(reply["out_id"])
        assert reply["session"] == session
        shown = await op(d, "session.show", session=session)
        assert (shown["status"], shown["ended_at"]) == ("active", None)
        with anyio.fail_after(30):  # the item is done now: the close goes through
            closed = await op(d, "session.close", session=session, summary="done")
        assert closed["closing_summary"] == "done"


async def test_brokerctl_close_and_bad_closes(make_daemon: DaemonFactory) -> None:
    d = make_daemon(QUIET)
    async with await Adapter.connect(d, "sms") as a:
        ack, _ = await say(a, "+1", "hello")
    session = ack["session"]
    missing = ctl(d, "close", "dm:ent_nobody")
    assert missing.returncode == 1 and "not_found" in missing.stderr
    done = ctl(d, "close", session, "--summary", "Said hello.")
    assert done.returncode == 0, done.stderr
    assert f"closed {session} (given summary): Said hello." in done.stdout
    twice = ctl(d, "close", session, "--summary", "again")
    assert twice.returncode == 1 and "already closed" in twice.stderr
    shown = await op(d, "session.show", session=session)
    assert (shown["status"], shown["closing_summary"]) == ("closed", "Said hello.")
    listed = ctl(d, "--json", "sessions", "--status", "closed")
    assert session in listed.stdout
    for name, args in (
        ("session.reset", {}),
        ("session.compact", {}),
        ("timer.add", {"text": "later", "in_s": 60}),
    ):
        with pytest.raises(BrokerError, match="is closed"):
            await op(d, name, session=session, **args)
    after = await op(d, "session.show", session=session)
    assert (after["turns"], after["queued"]) == (shown["turns"], shown["queued"])
    assert await op(d, "timer.list", session=session) == []
    audited = [(r["op"], r["target"], r["outcome"]) for r in await op(d, "audit.list")]
    assert audited.count(("session.close", session, "ok")) == 1  # the refused ones: none kept
