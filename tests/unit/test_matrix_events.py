"""adapters.matrix_events: Matrix events as inbound fields, replies as contents (no server)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.matrix_events import (
    Bot,
    MalformedEvent,
    Room,
    edit_content,
    is_mentioned,
    since_arrival,
    text_content,
    to_incoming,
)

BOT = Bot("@agent:example.org", "Agent Smith")
DM = Room("!dm:example.org", is_dm=True, names={"@ann:example.org": "Ann"})
GROUP = Room("!group:example.org", is_dm=False)


def event(content: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "type": "m.room.message",
        "event_id": "$e1",
        "sender": "@ann:example.org",
        "origin_server_ts": 1_700_000_000_000,
        "content": content,
        **fields,
    }


def text(body: str, **content: Any) -> dict[str, Any]:
    return {"msgtype": "m.text", "body": body, **content}


def test_a_dm_is_its_room_with_the_event_id_as_msg_id_and_the_display_name() -> None:
    incoming = to_incoming(event(text("hi")), DM, BOT)
    assert incoming is not None
    assert (incoming.msg_id, incoming.peer_kind, incoming.peer_id) == ("$e1", "dm", DM.room_id)
    assert (incoming.sender_id, incoming.sender_name) == ("@ann:example.org", "Ann")
    assert incoming.text == "hi" and incoming.thread_id is None and incoming.meta == {}
    assert incoming.ts == "2023-11-14T22:13:20Z"


def test_a_group_message_in_a_thread_carries_the_root_and_the_mention_flag() -> None:
    thread = {"rel_type": "m.thread", "event_id": "$root"}
    incoming = to_incoming(event(text("agent: help", **{"m.relates_to": thread})), GROUP, BOT)
    assert incoming is not None
    assert (incoming.peer_kind, incoming.peer_id, incoming.thread_id) == (
        "group",
        GROUP.room_id,
        "$root",
    )
    assert incoming.meta == {"mentioned": True}
    assert incoming.sender_name == "ann"  # no display name known: the localpart


@pytest.mark.parametrize(
    ("body", "content", "mentioned"),
    [
        ("hello all", {}, False),
        ("hey @agent:example.org", {}, True),
        ("Agent Smith, a word", {}, True),
        ("agents are many", {}, False),
        ("pinged", {"m.mentions": {"user_ids": ["@agent:example.org"]}}, True),
        ("pinged", {"m.mentions": {"user_ids": ["@bob:example.org"]}}, False),
    ],
)
def test_mentions(body: str, content: dict[str, Any], mentioned: bool) -> None:
    assert is_mentioned(content, body, BOT) is mentioned


def test_an_attachment_is_metadata_and_its_body_stays_the_text() -> None:
    image = {
        "msgtype": "m.file",
        "body": "report.pdf",
        "url": "mxc://example.org/x",
        "info": {"mimetype": "application/pdf", "size": 99},
    }
    incoming = to_incoming(event(image), DM, BOT)
    assert incoming is not None and incoming.text == "report.pdf"
    assert incoming.meta["attachments"] == [
        {
            "kind": "m.file",
            "name": "report.pdf",
            "type": "application/pdf",
            "size": 99,
            "url": "mxc://example.org/x",
        }
    ]


def test_an_edit_is_read_as_its_new_text() -> None:
    edit = text(
        "* fixed",
        **{
            "m.new_content": text("fixed"),
            "m.relates_to": {"rel_type": "m.replace", "event_id": "$old"},
        },
    )
    incoming = to_incoming(event(edit), DM, BOT)
    assert incoming is not None and incoming.text == "fixed"
    assert incoming.meta == {"correction_of": "$old"}


@pytest.mark.parametrize(
    "skipped",
    [
        event(text("mine"), sender=BOT.user_id),
        event(text("beep"), type="m.reaction"),
        event({"membership": "join"}, type="m.room.member", state_key="@ann:example.org"),
        event({"msgtype": "m.notice", "body": "another bot"}),
        event({}),  # redacted
    ],
)
def test_what_is_not_a_message_for_the_broker_is_none(skipped: dict[str, Any]) -> None:
    assert to_incoming(skipped, GROUP, BOT) is None


@pytest.mark.parametrize(
    "broken",
    [
        event(text("x"), event_id=None),
        event(text("x"), sender=7),
        event("not an object"),  # type: ignore[arg-type]
        event({"msgtype": "m.text"}),
        event({"body": "no msgtype"}),
        event(text("* x", **{"m.relates_to": {"rel_type": "m.replace", "event_id": "$o"}})),
    ],
)
def test_a_malformed_message_raises_malformed_event(broken: dict[str, Any]) -> None:
    with pytest.raises(MalformedEvent):
        to_incoming(broken, DM, BOT)


words = st.sampled_from(["m.text", "m.image", "m.replace", "m.thread", "$e0", "hi"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | words,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
content_keys = st.sampled_from(
    ["msgtype", "body", "url", "info", "filename", "m.relates_to", "m.new_content", "m.mentions"]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(content_keys | st.sampled_from(["rel_type", "event_id"]), json_values))
def test_any_content_is_a_message_none_or_malformed_never_a_crash(content: dict[str, Any]) -> None:
    try:
        incoming = to_incoming(event(content), GROUP, BOT)
    except MalformedEvent:
        return
    if incoming is not None:
        assert isinstance(incoming.text, str) and incoming.msg_id == "$e1"


def test_a_reply_in_a_thread_stays_in_it_and_an_edit_replaces() -> None:
    assert text_content("hi", None, "$q") == {"msgtype": "m.text", "body": "hi"}
    threaded = text_content("hi", "$root", "$q")["m.relates_to"]
    assert threaded["rel_type"] == "m.thread" and threaded["event_id"] == "$root"
    assert threaded["m.in_reply_to"] == {"event_id": "$q"}
    edit = edit_content("$shown", "final")
    assert edit["m.new_content"] == {"msgtype": "m.text", "body": "final"}
    assert edit["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$shown"}


def member(membership: str, user: str = BOT.user_id) -> dict[str, Any]:
    return {"type": "m.room.member", "state_key": user, "content": {"membership": membership}}


def test_a_room_just_joined_is_new_from_the_bots_invite_or_else_its_join() -> None:
    history, hello = event(text("old")), event(text("hello"))
    invited = [history, member("invite"), hello, member("join")]
    assert since_arrival(invited, BOT) == [hello, member("join")]
    joined_public = [history, member("join", "@ann:example.org"), member("join"), hello]
    assert since_arrival(joined_public, BOT) == [hello]
    assert since_arrival([history, hello], BOT) == [history, hello]  # an old room: all new
