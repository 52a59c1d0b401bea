"""Identity against the real daemon: contacts, entities, session keys and merges.

The daemon runs its default echo engine, so every message starts a turn and
`sessions.turns` grows. Where a merge's choice of primary depends on turns
(most turns, then latest activity, then the smaller label: see
core/identity.py pick_primary), the test waits for each turn's `deliver`
before going on, so the counts are known.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from wire.client import BrokerClient

pytestmark = pytest.mark.anyio

WAIT = 5.0
PUSHED = frozenset({"delta", "deliver", "log"})


@contextlib.contextmanager
def running_daemon(backend: str) -> Iterator[DaemonProcess]:
    work = Path(tempfile.mkdtemp(prefix="brk-", dir="/tmp"))
    d = DaemonProcess(work, {}, backend=backend).start()
    try:
        yield d
    finally:
        d.kill()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module", params=["asyncio", "trio"], ids=["d-asyncio", "d-trio"])
def shared(request: pytest.FixtureRequest) -> Iterator[DaemonProcess]:
    """One daemon per module and daemon backend; tests use fresh channels and senders."""
    with running_daemon(request.param) as d:
        yield d


# -- helpers ------------------------------------------------------------------


def uniq(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def inbound(msg_id: str, sender: str, **fields: Any) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "type": "inbound",
        "msg_id": msg_id,
        "sender_id": sender,
        "peer_kind": "dm",
        "text": f"hello from {sender}",
    }
    frame.update(fields)
    return frame


async def adapter(d: DaemonProcess, channel: str) -> BrokerClient:
    with anyio.fail_after(WAIT):
        return await BrokerClient.connect(d.socket, role="adapter", channel=channel)


async def operator(d: DaemonProcess) -> BrokerClient:
    with anyio.fail_after(WAIT):
        return await BrokerClient.connect(d.socket)


async def send(c: BrokerClient, frame: dict[str, Any]) -> dict[str, Any]:
    """Send a frame and return its ack (skipping replies the broker pushes)."""
    req = uniq("r")
    await c.send({**frame, "req": req})
    with anyio.fail_after(WAIT):
        answer = await c.recv_until(req)
    assert answer["type"] == "ack", answer
    return answer


async def say(c: BrokerClient, frame: dict[str, Any]) -> dict[str, Any]:
    """Send an inbound; return its ack once the turn it started was delivered."""
    req = uniq("r")
    await c.send({**frame, "req": req})
    ack: dict[str, Any] | None = None
    delivered = False
    with anyio.fail_after(WAIT):
        while ack is None or not delivered:
            got = await c.recv()
            if got.get("req") == req:
                ack = got
            elif got.get("type") == "deliver" and frame["msg_id"] in got["in_reply_to"]:
                assert got["status"] == "final", got
                await c.send({"type": "delivered", "out_id": got["out_id"]})
                delivered = True
            else:
                assert got.get("type") in PUSHED, got
    assert ack["type"] == "ack", ack
    return ack


async def op(c: BrokerClient, name: str, **args: Any) -> Any:
    with anyio.fail_after(WAIT):
        return await c.op(name, **args)


async def contact(c: BrokerClient, channel: str, sender: str) -> dict[str, Any]:
    shown: dict[str, Any] = await op(c, "contact.show", channel=channel, sender_id=sender)
    return shown


async def merge(c: BrokerClient, src: str, into: str) -> dict[str, Any]:
    result: dict[str, Any] = await op(c, "entity.merge", **{"from": src, "into": into})
    return result


def query(d: DaemonProcess, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = d.db()
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def count(d: DaemonProcess, table: str) -> int:
    return int(query(d, f"SELECT count(*) FROM {table}")[0][0])


def follow_merged(d: DaemonProcess, label: str) -> str:
    """Where a session's `merged_into` chain ends."""
    seen = {label}
    while True:
        row = query(d, "SELECT status, merged_into FROM sessions WHERE label = ?", label)
        assert row, label
        status, into = row[0]
        if status != "merged":
            return label
        assert into is not None and into not in seen, (label, into)
        seen.add(into)
        label = into


# -- first contact and session keys --------------------------------------------


async def test_first_contact_creates_contact_entity_and_dm_session(shared: DaemonProcess) -> None:
    d = shared
    channel, sender = uniq("c"), uniq("+1")
    before = {t: count(d, t) for t in ("contacts", "entities", "sessions")}
    async with await adapter(d, channel) as a:
        first = await send(a, inbound("m1", sender, sender_name="Mom"))
        second = await send(a, inbound("m2", sender))
    assert first["session"] == second["session"]
    assert first["item"] != second["item"]
    label = first["session"]
    assert label.startswith("dm:ent_")
    entity = label.removeprefix("dm:")
    assert {t: count(d, t) - n for t, n in before.items()} == {
        "contacts": 1,
        "entities": 1,
        "sessions": 1,
    }
    assert query(
        d,
        "SELECT entity_id, display_name FROM contacts WHERE channel = ? AND sender_id = ?",
        channel,
        sender,
    ) == [(entity, "Mom")]
    assert query(d, "SELECT kind, name, merged_into FROM entities WHERE id = ?", entity) == [
        ("contact", "Mom", None)
    ]
    assert query(
        d, "SELECT kind, entity_id, status, origin FROM sessions WHERE label = ?", label
    ) == [("dm", entity, "active", "inbound")]
    # A DM's peer defaults to its sender.
    assert query(
        d,
        "SELECT msg_id, peer_id, entity_id, session_label FROM inbound WHERE channel = ?"
        " ORDER BY id",
        channel,
    ) == [("m1", sender, entity, label), ("m2", sender, entity, label)]
    async with await operator(d) as o:
        assert await contact(o, channel, sender) == {
            "entity": entity,
            "canonical": entity,
            "session": label,
        }


async def test_contacts_are_per_channel_and_per_sender(shared: DaemonProcess) -> None:
    d = shared
    ch1, ch2 = uniq("c"), uniq("c")
    s1, s2 = uniq("+1"), uniq("+2")
    async with await adapter(d, ch1) as a, await adapter(d, ch2) as b:
        # Two new senders, one of them twice, in one send (so, most likely, one batch).
        reqs = ["p1", "p2", "p3"]
        frames = [inbound("x1", s1), inbound("x2", s2), inbound("x3", s1)]
        await a.send_raw(
            b"".join(
                orjson.dumps({**f, "req": r}) + b"\n" for f, r in zip(frames, reqs, strict=True)
            )
        )
        with anyio.fail_after(WAIT):
            acks = [await a.recv_until(r) for r in reqs]
        same_sender_elsewhere = await send(b, inbound("x1", s1))
    assert acks[0]["session"] == acks[2]["session"] != acks[1]["session"]
    assert same_sender_elsewhere["session"] not in {a["session"] for a in acks}
    rows = query(
        d, "SELECT channel, sender_id, entity_id FROM contacts WHERE channel IN (?, ?)", ch1, ch2
    )
    assert len(rows) == 3 and len({r[2] for r in rows}) == 3


async def test_group_session_keys(shared: DaemonProcess) -> None:
    d = shared
    channel, other = uniq("c"), uniq("c")
    s1, s2 = uniq("+1"), uniq("+2")
    group = uniq("grp")
    base = f"group:{channel}:{group}"

    def grp(msg_id: str, sender: str, **fields: Any) -> dict[str, Any]:
        return inbound(msg_id, sender, peer_kind="group", peer_id=group, **fields)

    async with await adapter(d, channel) as a, await adapter(d, other) as b:
        assert (await send(a, grp("g1", s1)))["session"] == base
        assert (await send(a, grp("g2", s2)))["session"] == base  # any member, one session
        assert (await send(a, grp("t1", s1, thread_id="T7")))["session"] == f"{base}:thread:T7"
        assert (await send(a, grp("t2", s2, thread_id="T7")))["session"] == f"{base}:thread:T7"
        assert (await send(a, grp("t3", s2, thread_id="T8")))["session"] == f"{base}:thread:T8"
        other_group = await send(a, inbound("g3", s1, peer_kind="group", peer_id="another"))
        assert other_group["session"] == f"group:{channel}:another"
        assert (await send(b, grp("g1", s1)))["session"] == f"group:{other}:{group}"
        dm = await send(a, inbound("d1", s1))
    assert dm["session"].startswith("dm:ent_")
    labels = [base, f"{base}:thread:T7", f"{base}:thread:T8", f"group:{channel}:another"]
    for label in labels:
        assert query(d, "SELECT kind, entity_id FROM sessions WHERE label = ?", label) == [
            ("group", None)
        ]
    # Group senders are contacts too, and s1's DM uses the entity its group message made.
    async with await operator(d) as o:
        c1 = await contact(o, channel, s1)
        c2 = await contact(o, channel, s2)
    assert c1["entity"] != c2["entity"]
    assert dm["session"] == f"dm:{c1['entity']}" == c1["session"]
    assert c2["session"] is None  # s2 has no DM session yet


# -- merges --------------------------------------------------------------------


async def test_merge_two_contacts_over_the_wire(shared: DaemonProcess) -> None:
    d = shared
    ch_a, ch_b = uniq("c"), uniq("c")
    a_id, b_id = uniq("+a"), uniq("+b")
    async with (
        await adapter(d, ch_a) as ad_a,
        await adapter(d, ch_b) as ad_b,
        await operator(d) as o,
    ):
        # A is merged into B, so B's entity becomes canonical;
        # A has more turns, so A's session becomes the primary.
        s_b = (await say(ad_b, inbound("b1", b_id)))["session"]
        s_a = (await say(ad_a, inbound("a1", a_id)))["session"]
        assert (await say(ad_a, inbound("a2", a_id)))["session"] == s_a
        turns = dict(query(d, "SELECT label, turns FROM sessions WHERE label IN (?, ?)", s_a, s_b))
        assert turns == {s_a: 2, s_b: 1}
        e_a = (await contact(o, ch_a, a_id))["entity"]
        e_b = (await contact(o, ch_b, b_id))["entity"]
        assert e_b < e_a and (s_a, s_b) == (f"dm:{e_a}", f"dm:{e_b}")

        result = await merge(o, e_a, e_b)
        assert result["canonical"] == e_b  # `into` stays canonical
        assert result["primary"] == s_a
        assert result["aliases"] == [{"alias": f"dm:{e_b}", "session": s_a}]

        demoted = await op(o, "session.show", session=s_b)
        assert (demoted["label"], demoted["status"], demoted["merged_into"]) == (
            s_b,
            "merged",
            s_a,
        )
        # Histories are not merged: B's turn stays where it was.
        assert [t["inputs"] for t in demoted["turns"]] == [["b1"]]
        primary = await op(o, "session.show", session=s_a)
        assert primary["status"] == "active" and primary["aliases"] == [f"dm:{e_b}"]
        assert [t["inputs"] for t in primary["turns"]] == [["a1"], ["a2"]]
        assert await contact(o, ch_a, a_id) == {"entity": e_a, "canonical": e_b, "session": s_a}
        assert await contact(o, ch_b, b_id) == {"entity": e_b, "canonical": e_b, "session": s_a}
        merged = await op(o, "sessions.list", status="merged", limit=10_000)
        assert s_b in {s["label"] for s in merged}

        # The next message of either contact goes to the primary.
        assert (await send(ad_b, inbound("b2", b_id)))["session"] == s_a
        assert (await send(ad_a, inbound("a3", a_id)))["session"] == s_a
        assert query(
            d, "SELECT entity_id FROM inbound WHERE channel = ? AND msg_id = 'b2'", ch_b
        ) == [(e_b,)]

        # Merging again, either way round, changes nothing.
        sql = "SELECT label, status, merged_into FROM sessions WHERE label IN (?, ?)"
        snapshot = sorted(query(d, sql, s_a, s_b))
        assert await merge(o, e_b, e_a) == result
        assert await merge(o, e_a, e_b) == result
        assert sorted(query(d, sql, s_a, s_b)) == snapshot
        aliases = query(
            d, "SELECT alias, session_label FROM session_aliases WHERE alias = ?", f"dm:{e_b}"
        )
        assert aliases == [(f"dm:{e_b}", s_a)]
        assert (await send(ad_b, inbound("b3", b_id)))["session"] == s_a


async def test_merge_chain_of_three_converges_on_one_primary(shared: DaemonProcess) -> None:
    d = shared
    chans = {k: uniq("c") for k in "abc"}
    senders = {k: uniq(f"+{k}") for k in "abc"}
    async with contextlib.AsyncExitStack() as stack:
        ads = {k: await stack.enter_async_context(await adapter(d, chans[k])) for k in "abc"}
        o = await stack.enter_async_context(await operator(d))

        async def one_turn(k: str, msg_id: str) -> str:
            ack = await say(ads[k], inbound(msg_id, senders[k]))
            await anyio.sleep(0.005)  # the next turn ends strictly later
            return str(ack["session"])

        s = {"a": await one_turn("a", "a1"), "b": await one_turn("b", "b1")}
        ent = {k: (await contact(o, chans[k], senders[k]))["entity"] for k in "ab"}
        first = await merge(o, ent["a"], ent["b"])
        # One turn each: the latest activity (b) wins.
        assert (first["canonical"], first["primary"]) == (ent["b"], s["b"])

        s["c"] = await one_turn("c", "c1")
        ent["c"] = (await contact(o, chans["c"], senders["c"]))["entity"]
        second = await merge(o, ent["c"], ent["a"])
        # `into` (a) is no root now: its set's root (b) stays canonical.
        assert (second["canonical"], second["primary"]) == (ent["b"], s["c"])
        assert second["aliases"] == [
            {"alias": f"dm:{ent['a']}", "session": s["c"]},
            {"alias": f"dm:{ent['b']}", "session": s["c"]},
        ]
        status = dict(
            query(d, "SELECT label, status FROM sessions WHERE label IN (?, ?, ?)", *s.values())
        )
        assert status == {s["a"]: "merged", s["b"]: "merged", s["c"]: "active"}
        assert {follow_merged(d, s[k]) for k in "abc"} == {s["c"]}
        for k in "abc":
            assert await contact(o, chans[k], senders[k]) == {
                "entity": ent[k],
                "canonical": ent["b"],
                "session": s["c"],
            }
            assert (await send(ads[k], inbound(f"{k}-next", senders[k])))["session"] == s["c"]
        # Any pair of the set merged again: the same answer.
        assert await merge(o, ent["b"], ent["c"]) == second
        assert await merge(o, ent["a"], ent["a"]) == second


async def test_a_contact_without_a_dm_session_reaches_the_primary_by_alias(
    shared: DaemonProcess,
) -> None:
    d = shared
    channel, group = uniq("c"), uniq("grp")
    x, y = uniq("+x"), uniq("+y")
    async with await adapter(d, channel) as a, await operator(d) as o:
        # y's entity is the older one, but y has written only in a group.
        await send(a, inbound("y1", y, peer_kind="group", peer_id=group))
        s_x = (await send(a, inbound("x1", x)))["session"]
        e_x = (await contact(o, channel, x))["entity"]
        e_y = (await contact(o, channel, y))["entity"]
        result = await merge(o, e_x, e_y)
        assert (result["canonical"], result["primary"]) == (e_y, s_x)
        assert result["aliases"] == [{"alias": f"dm:{e_y}", "session": s_x}]
        # y's DM key is dm:<canonical>, no session's label: it resolves by alias.
        assert query(d, "SELECT 1 FROM sessions WHERE label = ?", f"dm:{e_y}") == []
        assert (await send(a, inbound("y2", y)))["session"] == s_x
        assert (await op(o, "session.show", session=f"dm:{e_y}"))["label"] == s_x
        assert query(d, "SELECT 1 FROM sessions WHERE label = ?", f"dm:{e_y}") == []


# -- restart -------------------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # two daemon starts: once is enough
async def test_identity_survives_a_restart(make_daemon: DaemonFactory) -> None:
    d = make_daemon()
    ch_a, ch_b = "sms", "mail"
    async with await adapter(d, ch_a) as a, await adapter(d, ch_b) as b, await operator(d) as o:
        a1 = await send(a, inbound("a1", "+1555"))
        b1 = await send(b, inbound("b1", "bob@example.org"))
        e_a = (await contact(o, ch_a, "+1555"))["entity"]
        e_b = (await contact(o, ch_b, "bob@example.org"))["entity"]
        merged = await merge(o, e_a, e_b)
        before = [await contact(o, ch_a, "+1555"), await contact(o, ch_b, "bob@example.org")]
    primary = merged["primary"]
    assert primary in (a1["session"], b1["session"])

    d.restart()  # SIGKILL, then start again on the same ledger

    async with await adapter(d, ch_a) as a, await adapter(d, ch_b) as b, await operator(d) as o:
        assert [
            await contact(o, ch_a, "+1555"),
            await contact(o, ch_b, "bob@example.org"),
        ] == before
        assert (await send(a, inbound("a2", "+1555")))["session"] == primary
        assert (await send(b, inbound("b2", "bob@example.org")))["session"] == primary
        # The first answer survives too.
        again = await send(a, inbound("a1", "+1555"))
        assert again["duplicate"] is True
        assert (again["session"], again["item"]) == (a1["session"], a1["item"])
        assert await merge(o, e_b, e_a) == merged
        newcomer = await send(a, inbound("c1", "+1666"))
    assert newcomer["session"] not in (a1["session"], b1["session"])
    assert count(d, "contacts") == 3 and count(d, "entities") == 3
