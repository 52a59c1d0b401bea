"""Every read that lists or shows a session names the person it is with, the same
way: `sessions.list`, `session.show` and the console's two pages give the canonical
entity's name and the channels of every contact merged with it, for a session whose
own entity was merged into a named person and for a fork of the person's session."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.port.protocols import LedgerPort
from tests.conformance.records import inbound, ingest, tick, turn

pytestmark = pytest.mark.anyio


async def names_in_every_read(port: LedgerPort, label: str) -> list[tuple[Any, ...]]:
    listed = {r["label"]: r for r in await port.sessions_list(None, 100)}[label]
    shown = await port.session_show(label, 10)
    page = {r["label"]: r for r in await port.console_sessions(100, 0)}[label]
    tree = await port.console_session(label, 10)
    return [
        (listed["person"]["name"], sorted({c.split(":")[0] for c in listed["person"]["channels"]})),
        (shown["person"]["name"], sorted({c.split(":")[0] for c in shown["person"]["channels"]})),
        (page["person"], page["channels"]),
        (tree["person"], tree["channels"]),
    ]


async def test_a_merged_contact_s_sessions_and_forks_name_the_person(port: LedgerPort) -> None:
    sms = await ingest(port, inbound("m1", sender="+1555", channel="sms"))
    mail = await ingest(port, inbound("m2", sender="sarah@example.org", channel="mail"))
    assert sms.entity is not None and mail.entity is not None
    await port.name_entity(sms.entity, "Sarah", "person", tick())
    await port.merge_entities(mail.entity, sms.entity, tick())  # into the named person
    items = await port.open_items(sms.session)
    done = turn(sms.session, None, items)
    await port.submit_turn(done).result()
    fork = await port.fork(done.turn_id, None, tick())
    for label in (sms.session, mail.session, fork):
        assert await names_in_every_read(port, label) == [("Sarah", ["mail", "sms"])] * 4
