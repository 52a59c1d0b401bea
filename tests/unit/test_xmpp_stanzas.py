"""adapters.xmpp_stanzas: XMPP messages as inbound fields (no server: stanzas built here)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from slixmpp import JID, ClientXMPP, Message

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
    url = "https://files.example.org/cat.png"
    incoming = to_incoming(message(client, "ann@example.org/x", url, oob=url), BOT, NICKS)
    assert incoming is not None and incoming.text == url
    assert incoming.meta["attachments"] == [{"url": url, "name": ""}]
