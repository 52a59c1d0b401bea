"""Merge proposals through the port (ledger/proposals.py): an agent proposes only
about entities its turn reaches (refusals audited, nothing recorded), a decision is
made once, an accepted one merges the contact into the person, and an erasure takes
the proposals naming the person with it."""

from __future__ import annotations

import pytest

from core.reach import REFUSED
from ledger.port.errors import Conflict, NotFound
from ledger.port.protocols import LedgerPort
from ledger.port.records import InboundRecord, Reaching
from tests.conformance.records import DM, inbound, ingest, tick

pytestmark = pytest.mark.anyio
TOOL = "propose_merge"


async def entity_of(port: LedgerPort, msg_id: str, sender: str, channel: str = "chat") -> str:
    acc = await ingest(port, inbound(msg_id, sender=sender, channel=channel))
    assert acc.entity is not None
    return acc.entity


async def in_group(port: LedgerPort, msg_id: str, sender: str) -> tuple[str, str]:
    """A message of `sender` in the group `grp`: (its session, the sender's entity)."""
    rec = InboundRecord(
        "chat", msg_id, sender, sender, "group", "grp", None, "hi all", None, None, None, None
    )
    acc = await port.submit_inbound(rec, DM, tick()).result()
    assert acc.entity is not None
    return acc.session, acc.entity


def by(session: str, wide: tuple[tuple[str, str], ...] = ()) -> Reaching:
    return Reaching(session, TOOL, wide)


async def test_a_proposal_is_kept_once_and_listed(port: LedgerPort) -> None:
    group, alice = await in_group(port, "g1", "alice")
    _, mail = await in_group(port, "g2", "alice-mail")
    made = await port.propose_merge(by(group), None, mail, alice, "same  person\nsigns", tick())
    assert made is not None
    assert (made["contact"], made["person"], made["status"]) == (mail, alice, "pending")
    assert made["reason"] == "same person signs" and made["session"] == group
    again = await port.propose_merge(by(group), None, mail, alice, "again", tick())
    assert again is not None and again["proposal"] == made["proposal"]
    assert [p["proposal"] for p in await port.merge_proposals("pending", 10)] == [made["proposal"]]
    assert await port.merge_proposals("accepted", 10) == []
    assert (await port.merge_proposals(None, 1, made["proposal"]))[0]["reason"] == made["reason"]


async def test_past_the_turn_s_reach_it_is_refused_audited_and_not_kept(
    port: LedgerPort,
) -> None:
    alice = await entity_of(port, "a1", "alice")
    bob = await entity_of(port, "b1", "bob")
    carol = await entity_of(port, "c1", "carol")
    mine = f"dm:{alice}"
    # Alice's DM turn reaches Alice, not Bob or Carol, nor an entity that does not exist.
    for contact, person in ((bob, alice), (alice, bob), (bob, carol), ("ent_NOSUCH", alice)):
        assert await port.propose_merge(by(mine), None, contact, person, "x", tick()) is None
    assert await port.merge_proposals(None, 10) == []
    rows = await port.audit_list(None, TOOL, 100)
    assert [(r["op"], r["target"], r["outcome"]) for r in rows] == [(TOOL, mine, "refused")] * 4
    # An owner whose route grants reach "any" reaches everyone.
    wide = by(mine, (("chat", "alice"),))
    made = await port.propose_merge(wide, None, bob, carol, "same phone", tick())
    assert made is not None and made["status"] == "pending"
    # One person already: refused as a conflict, nothing kept.
    await port.merge_entities(carol, bob, tick())
    with pytest.raises(Conflict):
        await port.propose_merge(wide, None, carol, bob, "x", tick())
    assert REFUSED  # the tool answers this sentence for a None (broker/tools/people.py)


async def test_accepting_merges_the_contact_into_the_person_once(port: LedgerPort) -> None:
    group, sarah = await in_group(port, "g1", "sarah")
    _, mom = await in_group(port, "g2", "mom-mail")
    await entity_of(port, "d1", "sarah")  # each has a DM session
    await entity_of(port, "d2", "mom-mail")
    await port.name_entity(sarah, "Sarah", "person", tick())
    made = await port.propose_merge(by(group), "t1", mom, sarah, "same person", tick())
    assert made is not None
    decided, merged = await port.decide_merge(made["proposal"], True, "uid:1000", tick())
    assert decided["status"] == "accepted" and decided["decided_by"] == "uid:1000"
    assert merged is not None and merged.canonical == sarah  # the person stays canonical
    shown = await port.entity_show(mom)
    assert (shown["canonical"], shown["name"], shown["kind"]) == (sarah, "Sarah", "person")
    assert shown["members"] == sorted([sarah, mom])
    assert merged.primary in (f"dm:{sarah}", f"dm:{mom}")  # one DM session for both now
    assert (await port.entity_show(sarah))["session"] == shown["session"] == merged.primary
    with pytest.raises(Conflict):
        await port.decide_merge(made["proposal"], True, "uid:1000", tick())
    with pytest.raises(Conflict):
        await port.decide_merge(made["proposal"], False, "uid:1000", tick())
    with pytest.raises(NotFound):
        await port.decide_merge(made["proposal"] + 100, True, "uid:1000", tick())
    assert [p["status"] for p in await port.merge_proposals(None, 10)] == ["accepted"]


async def test_rejecting_changes_no_one(port: LedgerPort) -> None:
    group, a = await in_group(port, "g1", "a")
    _, b = await in_group(port, "g2", "b")
    made = await port.propose_merge(by(group), None, b, a, "guess", tick())
    assert made is not None
    decided, merged = await port.decide_merge(made["proposal"], False, "owner:chat:a", tick())
    assert (decided["status"], merged) == ("rejected", None)
    assert (await port.entity_show(b))["canonical"] == b
    with pytest.raises(Conflict):
        await port.decide_merge(made["proposal"], True, "uid:0", tick())
    assert (await port.entity_show(b))["canonical"] == b


async def test_an_erasure_takes_the_proposals_naming_the_person(port: LedgerPort) -> None:
    group, a = await in_group(port, "g1", "a")
    _, b = await in_group(port, "g2", "b")
    _, c = await in_group(port, "g3", "c")
    gone = await port.propose_merge(by(group), None, b, a, "b is a", tick())
    kept = await port.propose_merge(by(group), None, c, a, "c is a", tick())
    assert gone is not None and kept is not None
    await port.erase_entity(b, b, tick())
    assert [p["proposal"] for p in await port.merge_proposals(None, 10)] == [kept["proposal"]]
