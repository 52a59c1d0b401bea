"""Merge proposals on the real daemon: an agent proposes that two of Carol's numbers
are one person, a non-owner's `/merge yes` is refused, the owner's accepts, and from
then on both numbers are one person's, talking to one session. An agent without
reach over an entity cannot propose about it; the operator's side is `brokerctl
merges` (`merge.list`, `merge.accept`, `merge.reject`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.reach import REFUSED
from tests.conftest import DaemonFactory
from tests.integration.scripted import Scripted, call
from tests.integration.test_agent_tools import results

pytestmark = pytest.mark.anyio
CAROL, CAROL2, OWNER = "+3", "+4", "+9"
CTL = [sys.executable, "-c", "from brokerctl.main import main; main()"]


def ctl(s: Scripted, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CTL, "--config", str(s.d.config_path), *args], capture_output=True, text=True, timeout=60
    )


def owner_config(tmp: Path) -> dict[str, object]:
    policies = tmp / "policies.toml"
    policies.write_text(
        '[[rules]]\nname = "owner-reaches-all"\nmatch = { principal = ["owner"] }\nreach = "any"\n'
    )
    return {"owners": [{"channel": "sms", "sender_id": OWNER}], "policies_file": str(policies)}


async def test_an_agent_proposes_and_only_an_owner_accepts(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    s = Scripted(make_daemon, tmp_path, anyio_backend, owner_config(tmp_path))
    first = str((await s.say("hi, Carol here", "c1", sender=CAROL))["session"])
    second = str((await s.say("Carol, from my other phone", "c2", sender=CAROL2))["session"])
    await s.say("hello", "o1", sender=OWNER)

    def entity(label: str) -> str:
        return str(s.rows("SELECT entity_id FROM sessions WHERE label = ?", label)[0][0])

    carol, carol2 = entity(first), entity(second)
    # Carol's own agent reaches only Carol: naming the owner is refused, and audited.
    owner_entity = entity(
        str(
            s.rows(
                "SELECT label FROM sessions WHERE label NOT IN (?, ?) AND kind = 'dm'",
                first,
                second,
            )[0][0]
        )
    )
    nosy = call("propose_merge", contact=owner_entity, person=carol, reason="x")
    assert results(await s.say(nosy, "c3", sender=CAROL)) == [("propose_merge", "error", REFUSED)]
    assert s.rows("SELECT op, target, outcome FROM audit WHERE op = 'propose_merge'") == [
        ("propose_merge", first, "refused")
    ]
    # The owner's agent (reach "any") proposes.
    propose = call("propose_merge", contact=carol2, person=carol, reason="she said so")
    got = results(await s.say(propose, "o2", sender=OWNER))
    assert got[0][:2] == ("propose_merge", "ok"), got
    n = json.loads(got[0][2])["proposal"]
    listed = await s.op("merge.list")
    assert [(p["proposal"], p["contact"], p["person"], p["status"]) for p in listed] == [
        (n, carol2, carol, "pending")
    ]
    # /help shows /merge to the owner only; Carol's /merge yes is refused.
    assert "/merge yes N" in str((await s.say("/help", "o3", sender=OWNER))["text"])
    assert "/merge" not in str((await s.say("/help", "c4", sender=CAROL))["text"])
    refused = await s.say(f"/merge yes {n}", "c5", sender=CAROL)
    assert refused["text"] == "/merge is not allowed for you here."
    assert s.rows("SELECT status FROM merge_proposals") == [("pending",)]
    assert s.rows("SELECT merged_into FROM entities WHERE id = ?", carol2) == [(None,)]
    # The owner accepts: the merge of entity.merge {from: carol2, into: carol}.
    accepted = await s.say(f"/merge yes {n}", "o4", sender=OWNER)
    assert accepted["text"] == f"Merge proposal {n} accepted: {carol2} is now {carol}."
    assert s.rows("SELECT status, decided_by FROM merge_proposals") == [
        ("accepted", f"owner:sms:{OWNER}")
    ]
    assert s.rows("SELECT merged_into FROM entities WHERE id = ?", carol2) == [(carol,)]
    statuses = dict(
        s.rows("SELECT label, status FROM sessions WHERE label IN (?, ?)", first, second)
    )
    primary = next(label for label, status in statuses.items() if status == "active")
    assert sorted(statuses.values()) == ["active", "merged"]
    # Both numbers now talk to the one session.
    for sender, msg in ((CAROL, "c6"), (CAROL2, "c7")):
        assert (await s.say("still me", msg, sender=sender))["session"] == primary
    assert s.rows("SELECT role, op, target, outcome FROM audit WHERE op = 'merge.accept'") == [
        ("owner", "merge.accept", carol2, "ok")
    ]
    # A second decision changes nothing and says why.
    again = await s.say(f"/merge no {n}", "o5", sender=OWNER)
    assert again["text"] == f"merge proposal {n}: it was already accepted."
    malformed = await s.say("/merge perhaps", "o6", sender=OWNER)
    assert str(malformed["text"]).startswith("usage: /merge yes N")
    # A subprocess engine is offered both tools in its request's `tools` list.
    offered = s.requests(first)[0]["tools"]
    assert "propose_merge" in offered and "remember" in offered


async def test_an_operator_lists_and_decides(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    s = Scripted(make_daemon, tmp_path, anyio_backend, owner_config(tmp_path))
    a = str((await s.say("hi", "a1", sender="+5"))["session"])
    b = str((await s.say("hi", "b1", sender="+6"))["session"])
    await s.say("hello", "o1", sender=OWNER)
    ents = [str(s.rows("SELECT entity_id FROM sessions WHERE label = ?", x)[0][0]) for x in (a, b)]
    for msg, (contact, person) in (("o2", (ents[1], ents[0])), ("o3", (ents[0], ents[1]))):
        line = call("propose_merge", contact=contact, person=person, reason="maybe")
        assert results(await s.say(line, msg, sender=OWNER))[0][1] == "ok"
    one, two = (p["proposal"] for p in await s.op("merge.list"))
    listed = ctl(s, "merges", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [p["proposal"] for p in json.loads(listed.stdout)] == [one, two]
    rejected = json.loads(ctl(s, "merges", "reject", str(two), "--json").stdout)
    assert rejected["proposal"]["status"] == "rejected" and "canonical" not in rejected
    again = ctl(s, "merges", "reject", str(two))
    assert again.returncode == 1 and "conflict" in again.stderr
    assert ctl(s, "merges", "maybe").returncode == 64
    accepted = await s.op("merge.accept", proposal=one)
    assert (accepted["proposal"]["status"], accepted["canonical"]) == ("accepted", ents[0])
    assert await s.op("merge.list", status="pending") == []
    assert [p["status"] for p in await s.op("merge.list", status="accepted")] == ["accepted"]
    audited = s.rows("SELECT op, target, outcome FROM audit WHERE op LIKE 'merge.%' ORDER BY id")
    assert audited == [("merge.reject", ents[0], "ok"), ("merge.accept", ents[1], "ok")]
