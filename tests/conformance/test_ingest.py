"""Ingest, identity and merges, through the port."""

from __future__ import annotations

import pytest

from ledger.port.errors import NotFound
from ledger.port.protocols import LedgerPort
from tests.conformance.records import DM, inbound, ingest, tick

pytestmark = pytest.mark.anyio


async def test_a_repeated_message_gets_the_first_answer_and_stores_nothing(
    port: LedgerPort,
) -> None:
    first = await ingest(port, inbound("m1"))
    again = await ingest(port, inbound("m1", text="edited"))
    assert not first.duplicate and again.duplicate
    assert (again.session, again.item) == (first.session, first.item)
    assert [i.id for i in await port.open_items()] == [first.item]
    assert (await port.counts())["queued"] == 1


async def test_the_same_msg_id_on_another_channel_is_another_message(port: LedgerPort) -> None:
    a = await ingest(port, inbound("m1", channel="chat"))
    b = await ingest(port, inbound("m1", channel="mail"))
    assert not b.duplicate and a.item != b.item


async def test_first_contact_creates_a_contact_an_entity_and_a_dm_session(
    port: LedgerPort,
) -> None:
    acc = await ingest(port, inbound("m1", sender="bob"))
    contact = await port.contact_show("chat", "bob")
    assert acc.entity is not None
    assert contact["entity"] == contact["canonical"] == acc.entity
    assert contact["session"] == acc.session == f"dm:{acc.entity}"
    [item] = await port.open_items(acc.session)
    assert (item.text, item.sender_id, item.status) == ("hello", "bob", "queued")


async def test_a_batch_ingests_in_order(port: LedgerPort) -> None:
    batch = [(inbound(f"m{n}", sender="carol"), DM) for n in range(5)]
    accepted = await port.ingest(batch, tick())
    assert [a.msg_id for a in accepted] == [f"m{n}" for n in range(5)]
    assert [i.id for i in await port.open_items(accepted[0].session)] == [a.item for a in accepted]
    assert [a.seq for a in accepted] == sorted(a.seq for a in accepted)


async def test_a_merge_unites_entities_at_into_and_aliases_the_other_session(
    port: LedgerPort,
) -> None:
    old = await ingest(port, inbound("m1", sender="dave", channel="chat"))
    new = await ingest(port, inbound("m2", sender="dave@example.org", channel="mail"))
    assert old.entity is not None and new.entity is not None
    # Merged "into" the newer one, the newer one is the set's root.
    result = await port.merge_entities(old.entity, new.entity, tick())
    assert result.canonical == new.entity
    assert result.primary in (old.session, new.session)
    other = new.session if result.primary == old.session else old.session
    assert (other, result.primary) in [(a, s) for a, s in result.aliases]
    assert await port.resolve_session(other) == other  # a label still names its own session
    shown = await port.session_show(other, 10)
    assert (shown["status"], shown["merged_into"]) == ("merged", result.primary)
    # Merging again, either way round, changes nothing; the union is already one set.
    assert (await port.merge_entities(new.entity, old.entity, tick())).canonical == new.entity
    # Both contacts now lead to the canonical entity.
    assert (await port.contact_show("chat", "dave"))["canonical"] == new.entity


async def test_a_merge_of_an_unknown_entity_is_not_found_and_changes_nothing(
    port: LedgerPort,
) -> None:
    acc = await ingest(port, inbound("m1"))
    assert acc.entity is not None
    with pytest.raises(NotFound):
        await port.merge_entities("nobody", acc.entity, tick())
    assert (await port.session_show(acc.session, 10))["status"] == "active"


async def test_lookups_that_miss_are_not_found(port: LedgerPort) -> None:
    with pytest.raises(NotFound):
        await port.session_show("dm:nobody", 10)
    with pytest.raises(NotFound):
        await port.resolve_session("dm:nobody")
    with pytest.raises(NotFound):
        await port.contact_show("chat", "nobody")


async def test_a_chain_of_merges_ends_at_the_last_into(port: LedgerPort) -> None:
    made = [await ingest(port, inbound(f"m{n}", sender=f"erin{n}")) for n in range(3)]
    first, second, third = (a.entity for a in made)
    assert first is not None and second is not None and third is not None
    await port.merge_entities(first, second, tick())
    result = await port.merge_entities(second, third, tick())
    assert result.canonical == third
    for n in range(3):
        assert (await port.contact_show("chat", f"erin{n}"))["canonical"] == third
    # `into` not a root: the root of its set stays canonical.
    assert (await port.merge_entities(third, first, tick())).canonical == third
    # One DM session is primary; the others are merged into it, reachable by alias.
    statuses = [(await port.session_show(a.session, 1))["status"] for a in made]
    assert sorted(statuses) == ["active", "merged", "merged"]
