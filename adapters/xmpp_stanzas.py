"""XMPP messages as the broker's inbound fields: ids, mapping, mentions, attachments.

No I/O: a slixmpp `Message` in, an `Incoming` (or None) out.

The msg id is the server's stanza id (XEP-0359 `<stanza-id by=…>`, the same as the
message's MAM archive id), so a message seen live and again in a catch-up has one id;
without one, the sender's origin id or the stanza's own id, prefixed with the sender's
JID. `chat`/`normal` messages are DMs (peer_id the sender's bare JID); `groupchat` is
a group (peer_id the room's JID, sender_id the occupant's JID `room/nick`,
`meta.mentioned` when the body names the bot's nick); `<thread>` is the thread_id.
Messages with neither a body nor a file (chat states, receipts) are not messages, and
the bot's own messages echoed by a room are skipped.

Files go to `meta.attachments` (adapters/attachments.py) and the body is kept:
XEP-0447 file sharing and XEP-0385 SIMS state name, media type and size; an XEP-0066
out-of-band URL that neither names (most clients send one alone) is named by its
`desc`, else by the URL's last segment, its type and size left null for the adapter's
probe (adapters/url_probe.py).
"""

from __future__ import annotations

from typing import Any
from xml.etree.ElementTree import Element

from slixmpp import JID, Message

from adapters.attachments import attachment, name_from_url, size_of, text_with
from adapters.bridge import Incoming
from adapters.irc_text import mentions

OOB = "{jabber:x:oob}"
SFS = "{urn:xmpp:sfs:0}"
SIMS = "{urn:xmpp:sims:1}"
REFERENCE = "{urn:xmpp:reference:0}"
URL_DATA = "{http://jabber.org/protocol/url-data}"


def stanza_id(msg: Message, archive: str) -> str | None:
    """The id the server `archive` (a bare JID) gave the message, if it did."""
    sid = msg["stanza_id"]
    if sid["id"] and (not sid["by"] or JID(sid["by"]).bare == archive):
        return str(sid["id"])
    return None


def message_id(msg: Message, archive: str, archive_id: str | None = None) -> str:
    """The server's stanza id, else the origin or stanza id prefixed with the sender."""
    server_id = archive_id or stanza_id(msg, archive)
    if server_id:
        return f"xmpp-{archive}-{server_id}"[:128]
    own = msg["origin_id"]["id"] or msg["id"]
    return f"xmpp-{JID(msg['from']).full}-{own}"[:128]


def to_incoming(
    msg: Message, own_jid: str, room_nicks: dict[str, str], archive_id: str | None = None
) -> Incoming | None:
    """The stanza as inbound fields (dm or group); None for what is not a message for
    the broker (no body nor file, or the bot's own echo)."""
    files = attachments(msg.xml)
    body = text_with(str(msg["body"] or ""), files)
    if not body:
        return None
    sender = JID(msg["from"])
    kind = msg["type"] or "normal"
    meta: dict[str, Any] = {}
    if files:
        meta["attachments"] = files
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


def attachments(xml: Element) -> list[dict[str, Any]]:
    """The files a message names, from its own children (not from a forwarded message inside)."""
    found: list[dict[str, Any]] = []
    oob: list[Element] = []
    for child in xml:
        if child.tag == f"{OOB}x":
            oob.append(child)
        elif child.tag == f"{SFS}file-sharing":
            sources = child.find(f"{SFS}sources")
            urls = [] if sources is None else sources.iter(f"{URL_DATA}url-data")
            found.append(_described(child, [u.get("target", "") for u in urls]))
        elif child.tag == f"{REFERENCE}reference":
            shared = child.find(f"{SIMS}media-sharing")
            if shared is not None:
                sources = shared.find(f"{SIMS}sources")
                refs = [] if sources is None else sources.iter(f"{REFERENCE}reference")
                found.append(_described(shared, [r.get("uri", "") for r in refs]))
    stated = {a["url"] for a in found}
    for child in oob:
        url = (child.findtext(f"{OOB}url") or "").strip()
        if url and url not in stated:
            desc = (child.findtext(f"{OOB}desc") or "").strip()
            found.append(attachment(desc or name_from_url(url), None, None, url))
            stated.add(url)
    return found


def _described(holder: Element, urls: list[str]) -> dict[str, Any]:
    """The `<file>` (XEP-0446 metadata, or Jingle file transfer in SIMS) in `holder`."""
    fields: dict[str, str] = {}
    for file in holder:
        if file.tag.endswith("}file"):
            for item in file:
                fields.setdefault(item.tag.rpartition("}")[2], (item.text or "").strip())
    url = next((u for u in urls if u.startswith(("https:", "http:"))), urls[0] if urls else None)
    name = fields.get("name") or (name_from_url(url) if url else None)
    return attachment(name, fields.get("media-type"), size_of(fields.get("size")), url)
