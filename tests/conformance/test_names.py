"""People with names, through the port: `entity.name`, `entity.alias`, `entity.show`,
and what a merge does to a name; every refusal changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.port.errors import LedgerLookupError, NotFound
from ledger.port.protocols import LedgerPort
from tests.conformance.records import inbound, ingest, tick

pytestmark = pytest.mark.anyio


async def entity_of(port: LedgerPort, msg_id: str, sender: str, channel: str = "chat") -> str:
    acc = await ingest(port, inbound(msg_id, sender=sender, channel=channel))
    assert acc.entity is not None
    return acc.entity


async def test_a_named_entity_is_a_person_and_shows_so(port: LedgerPort) -> None:
    mom = await entity_of(port, "m1", "+1555")
    shown = await port.entity_show(mom)
    assert (shown["name"], shown["kind"], shown["canonical"]) == ("+1555", "contact", mom)
    assert shown["members"] == [mom] and shown["session"] == f"dm:{mom}"

    named = await port.name_entity(mom, "  Sarah  ", "person", tick())
    assert named == {"entity": mom, "name": "Sarah", "kind": "person"}
    shown = await port.entity_show(mom)
    assert (shown["name"], shown["kind"]) == ("Sarah", "person")
    # A new name without a kind keeps the kind.
    assert (await port.name_entity(mom, "Mom", None, tick()))["kind"] == "person"
    assert (await port.entity_show(mom))["name"] == "Mom"


async def test_naming_a_merged_contact_names_the_person(port: LedgerPort) -> None:
    sms = await entity_of(port, "m1", "+1555")
    mail = await entity_of(port, "m2", "sarah@example.org", channel="mail")
    await port.merge_entities(mail, sms, tick())
    named = await port.name_entity(mail, "Sarah", "person", tick())
    assert named["entity"] == sms  # the canonical root carries the name
    for e in (sms, mail):
        shown = await port.entity_show(e)
        assert (shown["canonical"], shown["name"], shown["kind"]) == (sms, "Sarah", "person")
        assert shown["members"] == sorted([sms, mail])


async def test_merged_into_a_bare_contact_a_person_keeps_the_name(port: LedgerPort) -> None:
    sarah = await entity_of(port, "m1", "+1555")
    other = await entity_of(port, "m2", "sarah@example.org", channel="mail")
    await port.name_entity(sarah, "Sarah", "person", tick())
    result = await port.merge_entities(sarah, other, tick())
    assert result.canonical == other  # `into` wins ...
    shown = await port.entity_show(sarah)
    assert (shown["canonical"], shown["name"], shown["kind"]) == (other, "Sarah", "person")
    # ... and a root that is a person keeps its own name; a contact's is dropped.
    third = await entity_of(port, "m3", "+1666")
    await port.name_entity(third, "Tom", "person", tick())
    await port.merge_entities(third, other, tick())
    assert (await port.entity_show(third))["name"] == "Sarah"
    fourth = await entity_of(port, "m4", "+1777")
    await port.merge_entities(fourth, other, tick())
    assert (await port.entity_show(fourth))["name"] == "Sarah"


async def test_a_person_entity_takes_its_contacts_in_any_order(port: LedgerPort) -> None:
    """The seed's "merge ent_001 into ent_002 (the new person entity)"."""
    contacts = [await entity_of(port, f"m{n}", f"+1{n}") for n in range(3)]
    person = await entity_of(port, "p", "sarah", channel="terminal")
    await port.name_entity(person, "Sarah", "person", tick())
    await port.merge_entities(contacts[2], contacts[0], tick())  # two contacts first
    for c in reversed(contacts):
        assert (await port.merge_entities(c, person, tick())).canonical == person
    for n in range(3):
        shown = await port.contact_show("chat", f"+1{n}")
        assert shown["canonical"] == person
    assert (await port.entity_show(contacts[1]))["name"] == "Sarah"


@pytest.mark.parametrize(
    ("args", "field", "code"),
    [
        (("ent_NOPE", "Sarah", None), "entity", "not_found"),
        ((None, "", None), "name", "invalid"),
        ((None, "   ", None), "name", "invalid"),
        ((None, "Sarah\nSmith", None), "name", "invalid"),
        ((None, "x" * 201, None), "name", "invalid"),
        ((None, "Sarah", "robot"), "kind", "invalid"),
    ],
)
async def test_a_bad_name_is_refused_and_changes_nothing(
    port: LedgerPort, args: tuple[Any, ...], field: str, code: str
) -> None:
    mom = await entity_of(port, "m1", "+1555")
    await port.name_entity(mom, "Sarah", "person", tick())
    before = await port.entity_show(mom)
    entity, name, kind = args
    with pytest.raises(LedgerLookupError) as info:
        await port.name_entity(entity or mom, name, kind, tick())
    assert (info.value.field, info.value.code) == (field, code)
    assert await port.entity_show(mom) == before


async def test_entity_show_of_nobody_is_not_found(port: LedgerPort) -> None:
    with pytest.raises(NotFound) as info:
        await port.entity_show("ent_NOPE")
    assert info.value.field == "entity"


async def test_a_manual_alias_leads_its_key_to_the_session(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1", sender="+1555"))
    added = await port.add_alias("mom", acc.session, tick())
    assert added == {"alias": "mom", "session": acc.session}
    assert await port.resolve_session("mom") == acc.session
    shown = await port.session_show("mom", 10)
    assert shown["label"] == acc.session and "mom" in shown["aliases"]
    # The same alias to the same session again changes nothing; by its alias too.
    assert await port.add_alias("mom", "mom", tick()) == added


async def test_an_alias_to_a_merged_session_leads_to_its_primary(port: LedgerPort) -> None:
    a = await ingest(port, inbound("m1", sender="+1555"))
    b = await ingest(port, inbound("m2", sender="sarah@example.org", channel="mail"))
    assert a.entity is not None and b.entity is not None
    result = await port.merge_entities(a.entity, b.entity, tick())
    assert result.primary is not None
    demoted = a.session if result.primary == b.session else b.session
    added = await port.add_alias("sarah", demoted, tick())
    assert added["session"] == result.primary
    assert await port.resolve_session("sarah") == result.primary


async def test_a_bad_alias_is_refused_and_changes_nothing(port: LedgerPort) -> None:
    mine = await ingest(port, inbound("m1", sender="+1555"))
    other = await ingest(port, inbound("m2", sender="+1666"))
    await port.add_alias("mom", mine.session, tick())
    before = (await port.session_show(mine.session, 10), await port.session_show(other.session, 10))
    cases = [
        ("dad", "dm:nobody", "session", "not_found"),
        ("mom", other.session, "alias", "invalid"),  # taken, leading elsewhere
        (other.session, mine.session, "alias", "invalid"),  # another session's label
        (mine.session, mine.session, "alias", "invalid"),  # its own label
        ("", mine.session, "alias", "invalid"),
        (" mom", mine.session, "alias", "invalid"),
        ("m\x00m", mine.session, "alias", "invalid"),
    ]
    for alias, session, field, code in cases:
        with pytest.raises(LedgerLookupError) as info:
            await port.add_alias(alias, session, tick())
        assert (info.value.field, info.value.code) == (field, code), alias
    after = (await port.session_show(mine.session, 10), await port.session_show(other.session, 10))
    assert after == before
    with pytest.raises(NotFound):
        await port.resolve_session("dad")
