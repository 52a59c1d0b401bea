"""Matrix events as the broker's inbound fields, and replies as event contents.

No I/O: a raw event (the JSON dict a sync returned) in, an `Incoming` (or
None) out; a reply's text in, the content to send out.

The msg id is the Matrix event id, the same whether the event came in a live sync or a
catch-up, so the broker's dedup sees one message. A DM room (the bot and one person,
or one the person invited the bot to as `is_direct`) is `peer_kind: dm` with `peer_id`
the room id (the reply goes back into that room); any other room is `group` with
`peer_id` the room id and `thread_id` the root of a Matrix thread (`m.relates_to` with
`rel_type: m.thread`). A room the bot just joined shows its history in the sync: only
the events after the bot's invite (or its join, without an invite) are new to it, so a
person's "hello" sent before the bot joined is answered and the room's old history is
not.

Only `m.room.message` events from others are messages; `m.notice` is what bots send
each other, so it is skipped (no bot loops). Attachments (`m.image`, `m.file`,
`m.video`, `m.audio`) go to `meta.attachments` (adapters/attachments.py: url the mxc
URL, and `kind` the msgtype) and the body is kept as the text. A message event without
a text body is malformed: `MalformedEvent`, which the caller logs with the event id
and skips.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from adapters.attachments import attachment, size_of
from adapters.bridge import Incoming
from adapters.irc_text import mentions

ATTACHMENT_TYPES = frozenset({"m.image", "m.file", "m.video", "m.audio"})
SKIPPED_TYPES = frozenset({"m.notice"})


class MalformedEvent(ValueError):
    """An event that claims to be a message but cannot be read as one."""


@dataclass(frozen=True, slots=True)
class Bot:
    """Who the adapter is on the server: what a mention looks like."""

    user_id: str
    display_name: str | None = None

    @property
    def localpart(self) -> str:
        return self.user_id.removeprefix("@").split(":", 1)[0]


@dataclass(frozen=True, slots=True)
class Room:
    """What the adapter knows of a room when one of its events arrives."""

    room_id: str
    is_dm: bool
    names: dict[str, str] = field(default_factory=dict)  # user id -> display name


def is_mentioned(content: dict[str, Any], body: str, bot: Bot) -> bool:
    """`m.mentions` names the bot, or the body has its user id or display name."""
    intentional = content.get("m.mentions")
    named = intentional.get("user_ids") if isinstance(intentional, dict) else None
    if isinstance(named, list) and bot.user_id in named:
        return True
    if bot.user_id.lower() in body.lower():
        return True
    names = [n for n in (bot.display_name, bot.localpart) if n]
    return any(mentions(body, name) for name in names)


def _attachment(content: dict[str, Any]) -> dict[str, Any]:
    info = content.get("info") if isinstance(content.get("info"), dict) else {}
    assert isinstance(info, dict)
    name = content.get("filename") or content.get("body")
    media_type = info.get("mimetype")
    url = content.get("url")
    return attachment(
        name if isinstance(name, str) else None,
        media_type if isinstance(media_type, str) else None,
        size_of(info.get("size")),
        url if isinstance(url, str) else None,
        kind=content["msgtype"],
    )


def _thread(content: dict[str, Any]) -> str | None:
    relation = content.get("m.relates_to")
    if isinstance(relation, dict) and relation.get("rel_type") == "m.thread":
        root = relation.get("event_id")
        return root if isinstance(root, str) and root else None
    return None


def _timestamp(event: dict[str, Any]) -> str | None:
    stamp = event.get("origin_server_ts")
    if not isinstance(stamp, int) or isinstance(stamp, bool):
        return None
    return datetime.fromtimestamp(stamp / 1000, UTC).isoformat().replace("+00:00", "Z")


def _edited(content: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """An edit (`m.replace`) is read as its new content, marked `correction_of`."""
    relation = content.get("m.relates_to")
    if not (isinstance(relation, dict) and relation.get("rel_type") == "m.replace"):
        return content
    new_content = content.get("m.new_content")
    if not isinstance(new_content, dict):
        raise MalformedEvent("an edit without m.new_content")
    meta["correction_of"] = relation.get("event_id")
    return new_content


def to_incoming(event: dict[str, Any], room: Room, bot: Bot) -> Incoming | None:
    """The event as inbound fields (its id, dm or group, attachments); None for what is
    not a message for the broker."""
    if event.get("type") != "m.room.message" or "state_key" in event:
        return None
    sender = event.get("sender")
    event_id = event.get("event_id")
    if not isinstance(event_id, str) or not event_id:
        raise MalformedEvent("a message event without an event_id")
    if not isinstance(sender, str) or not sender:
        raise MalformedEvent("a message event without a sender")
    if sender == bot.user_id:
        return None
    content = event.get("content")
    if not isinstance(content, dict):
        raise MalformedEvent("content is not an object")
    if not content:
        return None  # a redacted message: nothing left to answer
    if isinstance(content.get("msgtype"), str) and content["msgtype"] in SKIPPED_TYPES:
        return None
    meta: dict[str, Any] = {}
    content = _edited(content, meta)
    msgtype = content.get("msgtype")
    body = content.get("body")
    if not isinstance(body, str) or not isinstance(msgtype, str):
        raise MalformedEvent("a message without a text body or msgtype")
    if msgtype in ATTACHMENT_TYPES:
        meta["attachments"] = [_attachment(content)]
    thread = _thread(event["content"])
    if room.is_dm:
        peer_kind = "dm"
    else:
        peer_kind = "group"
        meta["mentioned"] = is_mentioned(event["content"], body, bot)
    return Incoming(
        msg_id=event_id,
        sender_id=sender,
        text=body,
        peer_kind=peer_kind,
        peer_id=room.room_id,
        thread_id=thread,
        sender_name=room.names.get(sender) or sender.removeprefix("@").split(":", 1)[0],
        meta=meta,
        ts=_timestamp(event),
    )


def since_arrival(events: list[dict[str, Any]], bot: Bot) -> list[dict[str, Any]]:
    """The events after the bot's own invite or join in this list, if it has one."""
    marks = {"invite": -1, "join": -1}
    for index, event in enumerate(events):
        content = event.get("content")
        membership = content.get("membership") if isinstance(content, dict) else None
        own = event.get("type") == "m.room.member" and event.get("state_key") == bot.user_id
        if own and membership in marks:
            marks[str(membership)] = index
    start = marks["invite"] if marks["invite"] >= 0 else marks["join"]
    return events[start + 1 :] if start >= 0 else events


def text_content(text: str, thread_root: str | None, in_reply_to: str | None) -> dict[str, Any]:
    """A reply: in the thread it answers (with a fallback reply for older clients)."""
    content: dict[str, Any] = {"msgtype": "m.text", "body": text}
    if thread_root:
        relation: dict[str, Any] = {"rel_type": "m.thread", "event_id": thread_root}
        relation["is_falling_back"] = True
        relation["m.in_reply_to"] = {"event_id": in_reply_to or thread_root}
        content["m.relates_to"] = relation
    return content


def edit_content(original: str, text: str) -> dict[str, Any]:
    """An `m.replace` edit of `original` to `text` (the final text is the last edit)."""
    return {
        "msgtype": "m.text",
        "body": f"* {text}",
        "m.new_content": {"msgtype": "m.text", "body": text},
        "m.relates_to": {"rel_type": "m.replace", "event_id": original},
    }
