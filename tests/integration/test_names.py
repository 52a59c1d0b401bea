"""People with names against the real daemon: `entity.name`, `entity.alias` and
`entity.show` over the socket, `brokerctl name`, `alias` and `entity`, the merge of a
person's contacts into the person entity, and every refusal answered plainly with
nothing changed and the daemon serving on."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from tests.ctl import in_process
from tests.harness import DaemonProcess
from tests.integration.test_identity import (
    adapter,
    contact,
    inbound,
    merge,
    op,
    operator,
    query,
    running_daemon,
    say,
    send,
    uniq,
)
from wire.client import BrokerClient, BrokerError

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=["asyncio", "trio"], ids=["d-asyncio", "d-trio"])
def shared(request: pytest.FixtureRequest) -> Iterator[DaemonProcess]:
    with running_daemon(request.param) as d:
        yield d


def brokerctl(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return in_process("--socket", str(d.socket), "--json", *args)


def ctl_text(d: DaemonProcess, *args: str) -> str:
    done = in_process("--socket", str(d.socket), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def ctl_json(d: DaemonProcess, *args: str) -> Any:
    done = brokerctl(d, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_contacts_merged_into_a_named_person(shared: DaemonProcess) -> None:
    """The seed's "that's my Mom, Sarah": her two contacts merged into the person."""
    d = shared
    sms, mail, term = uniq("sms"), uniq("mail"), uniq("term")
    async with (
        await adapter(d, sms) as a_sms,
        await adapter(d, mail) as a_mail,
        await adapter(d, term) as a_term,
        await operator(d) as o,
    ):
        s_sms = (await say(a_sms, inbound("s1", "+1555")))["session"]
        await say(a_mail, inbound("m1", "sarah@example.org"))
        await say(a_term, inbound("t1", "sarah"))
        e_sms = (await contact(o, sms, "+1555"))["entity"]
        e_mail = (await contact(o, mail, "sarah@example.org"))["entity"]
        person = (await contact(o, term, "sarah"))["entity"]  # the newest: becomes the person

        named = ctl_json(d, "name", person, "Sarah", "--kind", "person")
        assert named == {"entity": person, "name": "Sarah", "kind": "person"}
        for src in (e_sms, e_mail):
            assert (await merge(o, src, person))["canonical"] == person
        for ch, sender in ((sms, "+1555"), (mail, "sarah@example.org"), (term, "sarah")):
            assert (await contact(o, ch, sender))["canonical"] == person
        shown = ctl_json(d, "entity", e_mail)
        assert (shown["canonical"], shown["name"], shown["kind"]) == (person, "Sarah", "person")
        assert sorted(shown["members"]) == sorted([e_sms, e_mail, person])
        # Her next message, from any contact, reaches her one primary session.
        primary = shown["session"]
        assert (await send(a_sms, inbound("s2", "+1555")))["session"] == primary
        assert (await send(a_term, inbound("t2", "sarah")))["session"] == primary
        assert query(d, "SELECT name, kind FROM entities WHERE id = ?", person) == [
            ("Sarah", "person")
        ]
        assert primary in {s_sms} | {f"dm:{e}" for e in (e_mail, person)}

        # `sessions` and `show` name the person, with every contact of hers.
        rows = ctl_json(d, "sessions", "--limit", "10000")
        row = next(r for r in rows if r["label"] == primary)
        assert (row["person"]["entity"], row["person"]["name"]) == (person, "Sarah")
        assert sorted(row["person"]["channels"]) == sorted(
            [f"{sms}:+1555", f"{mail}:sarah@example.org", f"{term}:sarah"]
        )
        shown_text = ctl_text(d, "show", primary)
        assert "with Sarah (" in shown_text, shown_text


async def test_a_manual_alias_routes_its_key(shared: DaemonProcess) -> None:
    d = shared
    channel, room = uniq("c"), uniq("room")
    async with await adapter(d, channel) as a, await operator(d) as o:
        dm = (await say(a, inbound("x1", "+1777")))["session"]
        key = f"group:{channel}:{room}"
        assert ctl_json(d, "alias", key, dm) == {"alias": key, "session": dm}
        assert query(d, "SELECT reason FROM session_aliases WHERE alias = ?", key) == [("manual",)]
        # A message whose session key is the alias goes to the session it names.
        ack = await send(a, inbound("g1", "+1777", peer_kind="group", peer_id=room))
        assert ack["session"] == dm
        assert key in (await op(o, "session.show", session=dm))["aliases"]


async def ask(o: BrokerClient, op_name: str, /, **args: Any) -> Any:
    """An op whose arguments may include `name` (which `op` takes for the op's)."""
    with anyio.fail_after(5):
        return await o.op(op_name, **args)


async def refused(o: BrokerClient, op_name: str, /, **args: Any) -> tuple[str, str | None]:
    with pytest.raises(BrokerError) as info:
        await ask(o, op_name, **args)
    return info.value.code, info.value.frame.get("field")


async def test_bad_names_and_aliases_are_refused_and_change_nothing(
    shared: DaemonProcess,
) -> None:
    d = shared
    channel = uniq("c")
    async with await adapter(d, channel) as a, await operator(d) as o:
        mine = (await say(a, inbound("a1", "+1888")))["session"]
        other = (await say(a, inbound("b1", "+1999")))["session"]
        me = (await contact(o, channel, "+1888"))["entity"]
        await ask(o, "entity.name", entity=me, name="Ann", kind="person")
        ann = uniq("ann")
        await op(o, "entity.alias", alias=ann, session=mine)
        sql = "SELECT * FROM entities ORDER BY id", "SELECT * FROM session_aliases ORDER BY alias"
        before = [query(d, q) for q in sql]

        assert await refused(o, "entity.name", entity="ent_NOPE", name="X") == (
            "not_found",
            "entity",
        )
        assert await refused(o, "entity.name", entity=me, name="") == ("invalid", "name")
        assert await refused(o, "entity.name", entity=me, name="   ") == ("invalid", "name")
        assert await refused(o, "entity.name", entity=me, name="A", kind="robot") == (
            "invalid",
            "kind",
        )
        assert await refused(o, "entity.name", entity=me) == ("invalid", "name")
        assert await refused(o, "entity.alias", alias="x", session="dm:nobody") == (
            "not_found",
            "session",
        )
        assert await refused(o, "entity.alias", alias=ann, session=other) == ("invalid", "alias")
        assert await refused(o, "entity.alias", alias=other, session=mine) == ("invalid", "alias")
        assert await refused(o, "entity.alias", alias="", session=mine) == ("invalid", "alias")
        assert await refused(o, "entity.show", entity="ent_NOPE") == ("not_found", "entity")

        done = brokerctl(d, "alias", ann, other)
        assert done.returncode == 1 and "already leads to" in done.stderr
        done = brokerctl(d, "name", me, "Ann", "--kind", "robot")
        assert done.returncode == 1 and "kind must be one of" in done.stderr

        assert [query(d, q) for q in sql] == before
        # The daemon serves on, on the same connections.
        assert (await say(a, inbound("a2", "+1888")))["session"] == mine
        assert (await op(o, "entity.show", entity=me))["name"] == "Ann"
