"""XMPP messages as the broker's inbound fields: ids, mapping, mentions, attachments.

No I/O: a slixmpp `Message` in, an `Incoming` (or None) out.

Rule 1: the msg id is the server's stanza id (XEP-0359 `<stanza-id by=…>`, the
        same id as the message's MAM archive id), so a message seen live and
        again in a catch-up has one id; without one, the sender's origin id or
        the stanza's own id, prefixed with the sender's JID.
Rule 2: `chat`/`normal` messages are DMs (peer_id the sender's bare JID);
        `groupchat` is a group (peer_id the room's JID, sender_id the
        occupant's JID `room/nick`, `meta.mentioned` when the body names the
        bot's nick); `<thread>` is the thread_id.
Rule 3: messages without a body (chat states, receipts) are not messages; the
        bot's own messages echoed by a room are skipped; attachments (XEP-0066
        out-of-band URLs) go to `meta.attachments` and the body is kept.
"""

from __future__ import annotations

from typing import Any

from slixmpp import JID, Message

from .bridge import Incoming
from .irc_text import mentions


def stanza_id(msg: Message, archive: str) -> str | None:
    """The id the server `archive` (a bare JID) gave the message, if it did."""
    sid = msg["stanza_id"]
    if sid["id"] and (not sid["by"] or JID(sid["by"]).bare == archive):
        return str(sid["id"])
    return None


def message_id(msg: Message, archive: str, archive_id: str | None = None) -> str:
    """Rule 1."""
    server_id = archive_id or stanza_id(msg, archive)
    if server_id:
        return f"xmpp-{archive}-{server_id}"[:128]
    own = msg["origin_id"]["id"] or msg["id"]
    return f"xmpp-{JID(msg['from']).full}-{own}"[:128]


def to_incoming(
    msg: Message, own_jid: str, room_nicks: dict[str, str], archive_id: str | None = None
) -> Incoming | None:
    """Rules 2 and 3; None for what is not a message for the broker."""
    body = str(msg["body"] or "")
    if not body:
        return None
    sender = JID(msg["from"])
    kind = msg["type"] or "normal"
    meta: dict[str, Any] = {}
    oob = msg["oob"]["url"] if msg.get_plugin("oob", check=True) is not None else ""
    if oob:
        meta["attachments"] = [{"url": str(oob), "name": str(msg["oob"]["desc"] or "")}]
    if msg["replace"]["id"]:
        meta["correction_of"] = str(msg["replace"]["id"])
    thread = str(msg["thread"] or "") or None
    delay = msg["delay"]["stamp"] if msg.get_plugin("delay", check=True) is not None else None
    ts = delay.isoformat() if delay else None
    if kind == "groupchat":
        room = sender.bare
        nick = room_nicks.get(room, "")
        if not sender.resource or sender.resource == nick:
            return None  # the room's own notices, or our own message reflected
        meta["mentioned"] = bool(nick) and mentions(body, nick)
        return Incoming(
            msg_id=message_id(msg, room, archive_id),
            sender_id=sender.full,
            text=body,
            peer_kind="group",
            peer_id=room,
            thread_id=thread,
            sender_name=sender.resource,
            meta=meta,
            ts=ts,
        )
    if kind not in ("chat", "normal") or sender.bare == JID(own_jid).bare:
        return None
    return Incoming(
        msg_id=message_id(msg, JID(own_jid).bare, archive_id),
        sender_id=sender.bare,
        text=body,
        peer_kind="dm",
        thread_id=thread,
        sender_name=sender.user or sender.bare,
        meta=meta,
        ts=ts,
    )
