"""The records an inbound message becomes on its way in are built positionally
(router.py, registry.py) for speed; these tests pin every field to its name, so
two fields of one type swapped in order cannot pass unnoticed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from broker.config import Settings
from broker.deliveries import Deliveries
from broker.engines.echo import EchoEngine
from broker.mailbox.registry import Mailboxes
from broker.router import Router
from ledger.port.records import Accepted, InboundRecord, ItemInfo
from ledger.sqlite.store import Ledger
from policies.model import Rule
from wire.frames import InboundMessage

# A distinct value in every field, given by name.
RECORD = InboundRecord(
    channel="the-channel",
    msg_id="the-msg",
    sender_id="the-sender",
    sender_name="The Name",
    peer_kind="group",
    peer_id="the-peer",
    thread_id="the-thread",
    text="the text",
    ts="2026-11-22T10:00:00Z",
    queue_mode="collect",
    meta='{"k":1}',
    route_mode="followup",
)
RECORD_FIELDS = frozenset(InboundRecord._fields)


def test_route_puts_every_inbound_field_under_its_own_name() -> None:
    # The frame carries the record's own values, field by field (the channel
    # comes from the connection; meta travels as an object, is stored as JSON).
    # The route's mode is the routing's own (the `person_mode` fallback here).
    own = ("channel", "meta", "route_mode")
    fields = {k: v for k, v in RECORD._asdict().items() if k not in own}
    msg = InboundMessage(meta={"k": 1}, **fields)
    routed = Router((), frozenset()).route("the-channel", msg, req="r1", person_mode="followup")
    assert routed.record == RECORD


def test_the_route_decides_the_mode_of_a_message_that_names_none_once() -> None:
    msg = InboundMessage("m", "alice", None, "dm", None, None, "hi", None, None, None)
    collecting = Rule.model_validate({"name": "collecting", "queue": {"mode": "collect"}})
    by_rule = Router((collecting,), frozenset()).route("tg", msg, None, "interrupt").record
    assert (by_rule.queue_mode, by_rule.route_mode) == (None, "collect")
    by_default = Router((), frozenset()).route("tg", msg, None, "interrupt").record
    assert (by_default.queue_mode, by_default.route_mode) == (None, "interrupt")


def test_route_uses_the_sender_as_peer_when_the_frame_names_none() -> None:
    msg = InboundMessage("m", "alice", None, "dm", None, None, "hi", None, None, None)
    record = Router((), frozenset()).route("tg", msg, req=None).record
    assert (record.peer_id, record.thread_id, record.meta) == ("alice", None, None)


def test_a_committed_message_reaches_its_actor_with_every_field_under_its_own_name() -> None:
    boxes = Mailboxes(
        Settings(),
        cast(Ledger, SimpleNamespace(writer=None)),
        EchoEngine(),
        Router((), frozenset()),
        cast(Deliveries, SimpleNamespace()),
    )
    posted: list[ItemInfo] = []
    boxes.post = posted.append  # type: ignore[method-assign,assignment]
    boxes.on_committed(Accepted("the-msg", "the-session", "the-item", False, 42, "ent"), RECORD)
    assert posted == [
        ItemInfo(
            id="the-item",
            seq=42,
            session="the-session",
            source="person",
            mode="collect",
            status="queued",
            turn_id=None,
            payload=None,
            # The fields both records have, taken from the record by name.
            **{name: getattr(RECORD, name) for name in ItemInfo._fields if name in RECORD_FIELDS},
        )
    ]
