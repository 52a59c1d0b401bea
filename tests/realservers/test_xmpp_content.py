"""adapters.xmpp against a real Prosody: what a message carries besides its text.

An out-of-band attachment (XEP-0066) is metadata next to the kept text (its
server not asked: the probe is off, so the type comes from the name); a
message the adapter cannot read (a delay stamp that is no date) is logged
with its id and skipped, and the messages after it are answered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from slixmpp.xmlstream import ET

from tests.conftest import DaemonFactory
from tests.integration.wire import query, uniq, wait_until
from tests.realservers.processes import AdapterProcess
from tests.realservers.servers import Server
from tests.realservers.test_xmpp import BOT, body_from, start_adapter, xmpp_config
from tests.realservers.xmpp_client import XmppPerson

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


@pytest.fixture
async def ann(prosody: Server) -> Any:
    person = await XmppPerson(prosody, "ann").start()
    yield person
    await person.close()


def send_with(person: XmppPerson, text: str, extra: str, stanza_id: str) -> None:
    """A chat message to the bot with `extra` (raw XML) inside it."""
    msg = person.client.make_message(BOT, text, mtype="chat")
    msg["id"] = stanza_id
    msg.xml.append(ET.fromstring(extra))
    msg.send()


async def test_an_oob_attachment_is_metadata_and_a_malformed_stanza_is_skipped(
    prosody: Server,
    ann: XmppPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    cfg = xmpp_config(d.socket, prosody, short_tmp, attachment_probe_s=0)
    proc = start_adapter(adapters, short_tmp, cfg)

    oob = (
        "<x xmlns='jabber:x:oob'><url>https://files.example.org/cat.png</url>"
        "<desc>cat.png</desc></x>"
    )
    send_with(ann, "look at this", oob, uniq("oob"))
    await ann.expect(body_from(BOT, "look at this"))

    broken = uniq("broken")
    send_with(ann, "from the past", "<delay xmlns='urn:xmpp:delay' stamp='not-a-date'/>", broken)
    after = uniq("after")
    ann.say(BOT, after)
    await ann.expect(body_from(BOT, after))

    async def logged() -> bool:
        return f"malformed message {broken} skipped" in proc.log()

    await wait_until(logged, "the malformed message logged with its id")
    texts = {r[0]: r[1] for r in query(d, "SELECT text, meta FROM inbound")}
    assert set(texts) == {"look at this", after}
    assert orjson.loads(texts["look at this"]) == {
        "attachments": [
            {
                "name": "cat.png",
                "type": "image/png",
                "size": None,
                "url": "https://files.example.org/cat.png",
            }
        ]
    }
