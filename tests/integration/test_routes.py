"""Forks a person can talk to, on the real daemon: `/fork` and `/switch` from a chat,
`route.bind`/`route.unbind` from an operator, bindings that survive a restart, a switch
to someone else's session refused, and agent_send's `fork` target."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import DaemonFactory
from tests.ctl import in_process
from tests.harness import DaemonProcess
from tests.integration.wire import Adapter, Frame, op, query, show, wait_until
from wire.client import BrokerError

pytestmark = pytest.mark.anyio
CHANNEL = "sms"


async def say(a: Adapter, msg_id: str, text: str, sender: str = "+1") -> tuple[str, Frame]:
    """Send a DM; the session its ack names and the reply it gets (confirmed)."""
    ack = await a.send_inbound(msg_id, text, sender, mode="followup")
    reply = await a.deliver(msg_id=msg_id)
    await a.confirm(reply["out_id"])
    return ack["session"], reply


def bindings(d: DaemonProcess) -> list[tuple[str, ...]]:
    return [
        tuple(r)
        for r in query(d, "SELECT channel, peer_kind, peer_id, session_label FROM route_bindings")
    ]


async def test_fork_then_switch_back_and_the_binding_survives_a_restart(
    make_daemon: DaemonFactory, anyio_backend: str
) -> None:
    d = make_daemon(backend=anyio_backend)
    async with await Adapter.connect(d, CHANNEL) as a:
        home, first = await say(a, "m1", "hello")
        assert first["text"] == "hello"

        landed, forked = await say(a, "m2", "/fork")
        assert landed == home and forked["session"] == home and forked["peer_id"] == "+1"
        found = re.search(r"now talks to (fork:\S+);", forked["text"])
        assert found, forked["text"]
        fork = found[1]

        on_fork, reply = await say(a, "m3", "on the fork")
        assert on_fork == fork
        assert (reply["session"], reply["peer_id"], reply["text"]) == (fork, "+1", "on the fork")
        shown = await show(d, fork)
        assert [t["output"] for t in shown["turns"]] == ["hello", "on the fork"]
        assert [t["output"] for t in (await show(d, home))["turns"]] == ["hello"]

        _, back = await say(a, "m4", f"/switch {home}")
        assert back["session"] == fork and f"now talks to {home}" in back["text"]
        again, reply = await say(a, "m5", "home again")
        assert again == home and reply["session"] == home
        await say(a, "m6", f"/switch {fork}")
    assert bindings(d) == [(CHANNEL, "dm", "+1", fork)]

    d.restart()
    async with await Adapter.connect(d, CHANNEL) as a:
        after, reply = await say(a, "m7", "after the restart")
        assert after == fork and reply["text"] == "after the restart"
    assert [t["output"] for t in (await show(d, fork))["turns"]][-1] == "after the restart"


async def test_a_switch_to_another_persons_session_is_refused_and_changes_nothing(
    make_daemon: DaemonFactory, anyio_backend: str
) -> None:
    d = make_daemon(backend=anyio_backend)
    async with await Adapter.connect(d, CHANNEL) as a:
        mine, _ = await say(a, "m1", "mine", sender="+1")
        theirs, _ = await say(a, "t1", "theirs", sender="+2")
        assert mine != theirs
        fork_of_theirs = (await op(d, "session.fork", turn=(await show(d, theirs))["head"]))[
            "label"
        ]
        for target in (theirs, fork_of_theirs):
            _, refused = await say(a, f"s-{target}", f"/switch {target}")
            assert refused["text"] == f"{target} is not one of your sessions."
        _, unknown = await say(a, "s-none", "/switch dm:nobody")
        assert unknown["text"] == "There is no session named dm:nobody."
        _, usage = await say(a, "s-bare", "/switch")
        assert usage["text"].startswith("usage: /switch")
        assert bindings(d) == []
        still, _ = await say(a, "m2", "still mine", sender="+1")
        assert still == mine
    reasons = query(
        d,
        "SELECT q.reason FROM queue_items q JOIN inbound i ON i.id = q.inbound_id"
        " WHERE i.msg_id LIKE 's-%' ORDER BY q.seq",
    )
    assert [r[0] for r in reasons] == ["command:refused"] * 3 + ["command:invalid"]


async def test_route_bind_and_unbind_by_an_operator(
    make_daemon: DaemonFactory, anyio_backend: str
) -> None:
    d = make_daemon(backend=anyio_backend)
    conv = {"channel": CHANNEL, "peer_kind": "dm", "peer_id": "+1"}
    async with await Adapter.connect(d, CHANNEL) as a:
        home, _ = await say(a, "m1", "one")
        other, _ = await say(a, "o1", "other person", sender="+2")
        fork = (await op(d, "session.fork", turn=(await show(d, home))["head"]))["label"]

        assert await op(d, "route.bind", **conv, session=fork) == {"session": fork}
        assert [b["session"] for b in await op(d, "route.list")] == [fork]
        bound, reply = await say(a, "m2", "two")
        assert bound == fork and (reply["session"], reply["peer_id"]) == (fork, "+1")

        for args, code, field in (
            ({**conv, "session": other}, "invalid", "session"),
            ({**conv, "session": "dm:nobody"}, "not_found", "session"),
            ({**conv, "peer_id": "+9", "session": fork}, "not_found", "peer_id"),
            ({**conv, "peer_kind": "room", "session": fork}, "invalid", "peer_kind"),
            ({**conv, "channel": "Bad Channel", "session": fork}, "invalid", "channel"),
        ):
            with pytest.raises(BrokerError) as refused:
                await op(d, "route.bind", **args)
            assert (refused.value.code, refused.value.field) == (code, field), args
        assert bindings(d) == [(CHANNEL, "dm", "+1", fork)]  # nothing changed

        assert await op(d, "route.unbind", **conv) == {"session": fork, "status": "unbound"}
        with pytest.raises(BrokerError) as again:
            await op(d, "route.unbind", **conv)
        assert again.value.code == "not_found"
        home_again, _ = await say(a, "m3", "three")
        assert home_again == home


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # brokerctl runs its own loop
async def test_brokerctl_bind_bindings_and_unbind(daemon: DaemonProcess) -> None:
    async with await Adapter.connect(daemon, CHANNEL) as a:
        home, _ = await say(a, "m1", "one")
    fork = (await op(daemon, "session.fork", turn=(await show(daemon, home))["head"]))["label"]

    def ctl(*args: str) -> subprocess.CompletedProcess[str]:
        return in_process("--config", str(daemon.config_path), *args)

    done = ctl("bind", CHANNEL, "dm", "+1", fork)
    assert done.returncode == 0 and f"now talks to {fork}" in done.stdout, done.stderr
    listed = ctl("--json", "bindings")
    assert listed.returncode == 0 and fork in listed.stdout
    done = ctl("unbind", CHANNEL, "dm", "+1")
    assert done.returncode == 0 and f"no longer bound to {fork}" in done.stdout, done.stderr
    refused = ctl("unbind", CHANNEL, "dm", "+1")
    assert refused.returncode == 1 and "not_found" in refused.stderr


async def test_agent_send_to_a_fork_target(make_daemon: DaemonFactory, anyio_backend: str) -> None:
    d = make_daemon(backend=anyio_backend)
    async with await Adapter.connect(d, CHANNEL) as a:
        home, _ = await say(a, "m1", "one")
        await say(a, "m2", "two")
    first = (await show(d, home))["turns"][0]["id"]
    done = await op(
        d,
        "agent_send",
        op="dispatch",
        target={"kind": "fork", "turn": first, "label_hint": "try"},
        task="a task on the fork",
    )
    assert done["session"] == "fork:try"

    async def ran() -> bool:
        return len((await show(d, "fork:try"))["turns"]) == 2

    await wait_until(ran, "the fork's task to run")
    shown = await show(d, "fork:try")
    assert shown["parent"] == home and shown["turns"][0]["id"] == first
    assert shown["turns"][1]["output"] == "a task on the fork"
    for target, code in (
        ({"kind": "fork", "turn": "nope"}, "not_found"),
        ({"kind": "fork"}, "invalid"),
    ):
        with pytest.raises(BrokerError) as bad:
            await op(d, "agent_send", op="dispatch", target=target, task="x")
        assert (bad.value.code, bad.value.field) == (code, "target")
