"""Records sent to the writer process (by pickle) come back with their type and fields."""

from __future__ import annotations

import pickle

import pytest

from core.identity import SessionSpec
from ledger.port.records import Accepted, InboundRecord, ItemInfo

RECORDS = [
    InboundRecord("chat", "m1", "u1", "Ann", "dm", "u1", None, "hello", None, "collect", None),
    SessionSpec("dm:{entity}", "helper"),
    Accepted("m1", "dm:ent_1", "item_1", False, 7, "ent_1"),
    ItemInfo(
        "item_1", 7, "dm:ent_1", "person", None, "queued", None, None, "chat", "m1",
        "u1", "Ann", "dm", "u1", None, "hello", dispatch_id="d1",
    ),
]  # fmt: skip


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_round_trip_keeps_type_and_fields(record: tuple[object, ...]) -> None:
    data = pickle.dumps(record, pickle.HIGHEST_PROTOCOL)
    back = pickle.loads(data)
    assert type(back) is type(record)
    assert back == record
