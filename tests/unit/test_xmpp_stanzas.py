"""adapters.xmpp_stanzas: XMPP messages as inbound fields (no server: stanzas built here)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from slixmpp import JID, ClientXMPP, Message
from slixmpp.xmlstream import ET

from adapters.xmpp_stanzas import to_incoming

BOT = "bot@example.org"
ROOM = "help@conference.example.org"
NICKS = {ROOM: "agent"}


@pytest.fixture(scope="module")
def client() -> Iterator[ClientXMPP]:
    """A client never connected: it only builds stanzas (on an event loop it owns)."""
    loop = asyncio.new_event_loop()
    client = ClientXMPP(BOT, "unused", loop=loop)
    for plugin in ("xep_0045", "xep_0066", "xep_0203", "xep_0308", "xep_0359"):
        client.register_plugin(plugin)
    yield client
    loop.close()


def message(
    client: ClientXMPP, sender: str, body: str, kind: Any = "chat", **extra: str
) -> Message:
    msg = client.make_message(JID(BOT), body, mtype=kind, mfrom=JID(sender))
    msg["id"] = "m1"
    if "stanza_id" in extra:
        msg["stanza_id"]["id"] = extra["stanza_id"]
        msg["stanza_id"]["by"] = extra.get("by", BOT)
    if "thread" in extra:
        msg["thread"] = extra["thread"]
    if "oob" in extra:
        msg["oob"]["url"] = extra["oob"]
    return msg


def test_a_chat_is_a_dm_with_the_servers_stanza_id_and_thread(client: ClientXMPP) -> None:
    msg = message(client, "ann@example.org/phone", "hi", stanza_id="s-1", thread="t")
    incoming = to_incoming(msg, BOT, NICKS)
    assert incoming is not None
    assert (incoming.msg_id, incoming.peer_kind, incoming.peer_id) == (
        f"xmpp-{BOT}-s-1",
        "dm",
        None,
    )
    assert (incoming.sender_id, incoming.sender_name, incoming.thread_id) == (
        "ann@example.org",
        "ann",
        "t",
    )
    assert incoming.target().peer_id == "ann@example.org"


def test_a_catch_up_uses_the_archive_id_so_live_and_archived_agree(client: ClientXMPP) -> None:
    live = to_incoming(message(client, "ann@example.org/x", "hi", stanza_id="a-7"), BOT, NICKS)
    archived = to_incoming(message(client, "ann@example.org/x", "hi"), BOT, NICKS, "a-7")
    assert live is not None and archived is not None and live.msg_id == archived.msg_id


def test_without_a_server_id_the_sender_and_its_id_are_used(client: ClientXMPP) -> None:
    incoming = to_incoming(message(client, "ann@example.org/x", "hi"), BOT, NICKS)
    assert incoming is not None and incoming.msg_id == "xmpp-ann@example.org/x-m1"


def test_a_room_message_is_a_group_with_the_mention_flag(client: ClientXMPP) -> None:
    named = to_incoming(
        message(client, f"{ROOM}/ann", "agent: help?", "groupchat", stanza_id="r-1", by=ROOM),
        BOT,
        NICKS,
    )
    plain = to_incoming(message(client, f"{ROOM}/ann", "hello all", "groupchat"), BOT, NICKS)
    assert named is not None and plain is not None
    assert (named.peer_kind, named.peer_id, named.sender_id, named.sender_name) == (
        "group",
        ROOM,
        f"{ROOM}/ann",
        "ann",
    )
    assert named.msg_id == f"xmpp-{ROOM}-r-1"
    assert named.meta["mentioned"] is True and plain.meta["mentioned"] is False


def test_what_is_not_a_message_for_the_broker_is_skipped(client: ClientXMPP) -> None:
    assert to_incoming(message(client, "ann@example.org/x", ""), BOT, NICKS) is None
    assert to_incoming(message(client, f"{ROOM}/agent", "own", "groupchat"), BOT, NICKS) is None
    assert to_incoming(message(client, ROOM, "subject", "groupchat"), BOT, NICKS) is None
    assert to_incoming(message(client, f"{BOT}/other", "self", "chat"), BOT, NICKS) is None
    assert to_incoming(message(client, "ann@example.org/x", "x", "headline"), BOT, NICKS) is None


def test_an_attachment_is_metadata_and_the_text_is_kept(client: ClientXMPP) -> None:
    url = "https://files.example.org/a/my%20cat.png"
    incoming = to_incoming(message(client, "ann@example.org/x", url, oob=url), BOT, NICKS)
    assert incoming is not None and incoming.text == url
    # Type and size are left to the adapter's probe of the URL (adapters/url_probe.py).
    assert incoming.meta["attachments"] == [
        {"name": "my cat.png", "type": None, "size": None, "url": url}
    ]


def with_xml(client: ClientXMPP, body: str, *children: str) -> Message:
    msg = message(client, "ann@example.org/x", body)
    for child in children:
        msg.xml.append(ET.fromstring(child))
    return msg


SFS = """<file-sharing xmlns='urn:xmpp:sfs:0' disposition='inline'>
  <file xmlns='urn:xmpp:file:metadata:0'>
    <media-type>image/jpeg</media-type><name>summit.jpg</name><size>3032449</size>
  </file>
  <sources><url-data xmlns='http://jabber.org/protocol/url-data'
    target='https://download.example.org/f/summit.jpg'/></sources>
</file-sharing>"""

SIMS = """<reference xmlns='urn:xmpp:reference:0' type='data'>
  <media-sharing xmlns='urn:xmpp:sims:1'>
    <file xmlns='urn:xmpp:jingle:apps:file-transfer:5'>
      <media-type>application/pdf</media-type><name>plan.pdf</name><size>5120</size>
    </file>
    <sources><reference xmlns='urn:xmpp:reference:0' type='data'
      uri='https://download.example.org/f/plan.pdf'/></sources>
  </media-sharing>
</reference>"""


def test_stateless_file_sharing_and_sims_state_name_type_and_size(client: ClientXMPP) -> None:
    oob = "<x xmlns='jabber:x:oob'><url>https://download.example.org/f/summit.jpg</url></x>"
    incoming = to_incoming(with_xml(client, "photos", SFS, SIMS, oob), BOT, NICKS)
    assert incoming is not None and incoming.text == "photos"
    # The out-of-band fallback of the shared file is the same file, not a second one.
    assert incoming.meta["attachments"] == [
        {
            "name": "summit.jpg",
            "type": "image/jpeg",
            "size": 3032449,
            "url": "https://download.example.org/f/summit.jpg",
        },
        {
            "name": "plan.pdf",
            "type": "application/pdf",
            "size": 5120,
            "url": "https://download.example.org/f/plan.pdf",
        },
    ]


def test_a_file_without_a_body_is_a_message_whose_text_is_its_url(client: ClientXMPP) -> None:
    incoming = to_incoming(with_xml(client, "", SFS), BOT, NICKS)
    assert incoming is not None
    assert incoming.text == "https://download.example.org/f/summit.jpg"


def test_a_stated_size_that_is_no_number_is_null(client: ClientXMPP) -> None:
    odd = SFS.replace("<size>3032449</size>", "<size>big</size>")
    oob = "<x xmlns='jabber:x:oob'><url>https://x.example.org/y</url><desc>the Y</desc></x>"
    incoming = to_incoming(with_xml(client, "see", odd, oob), BOT, NICKS)
    assert incoming is not None
    files = incoming.meta["attachments"]
    assert files[0]["size"] is None and files[0]["type"] == "image/jpeg"
    assert files[1] == {
        "name": "the Y",
        "type": None,
        "size": None,
        "url": "https://x.example.org/y",
    }
