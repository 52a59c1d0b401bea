"""File snapshots through the port: stored with the turn, read back after any turn,
inherited by forks, collected only when no snapshot names them."""

from __future__ import annotations

import base64
import hashlib

import pytest

from ledger.port.errors import NotFound
from ledger.port.protocols import LedgerPort, TurnRecord
from tests.conformance.records import inbound, ingest, turn

pytestmark = pytest.mark.anyio


async def file_turn(
    port: LedgerPort, session: str, parent: str | None, *files: dict[str, object]
) -> TurnRecord:
    rec = turn(session, parent, [])
    rec.events = [("file", dict(f)) for f in files]
    await port.submit_turn(rec).result()
    return rec


async def test_snapshots_round_trip_through_the_port(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    s = acc.session
    t1 = await file_turn(port, s, None, {"path": "a.txt", "op": "create", "content": "one\n"})
    t2 = await file_turn(port, s, t1.turn_id, {"path": "a.txt", "op": "edit", "content": "two\n"})
    binary = bytes([0, 255, 1])
    t3 = await file_turn(
        port,
        s,
        t2.turn_id,
        {"path": "b.bin", "op": "write", "content_b64": base64.b64encode(binary).decode()},
    )
    history = await port.file_history(s, "a.txt")
    assert [(h["turn"], h["op"]) for h in history] == [(t1.turn_id, "create"), (t2.turn_id, "edit")]
    assert history[1]["before"] == hashlib.sha256(b"one\n").hexdigest()
    first = await port.file_at(s, "a.txt", t1.turn_id)
    assert (first["content"], first["bytes"]) == ("one\n", 4)
    assert (await port.file_at(s, "a.txt", None))["content"] == "two\n"
    assert (await port.file_at(s, "b.bin", None))["content_b64"] == base64.b64encode(
        binary
    ).decode()
    assert [(f["path"], f["turn"]) for f in await port.file_list(s)] == [
        ("a.txt", t2.turn_id),
        ("b.bin", t3.turn_id),
    ]
    with pytest.raises(NotFound):
        await port.file_at(s, "b.bin", t2.turn_id)  # not yet written then
    with pytest.raises(NotFound):
        await port.file_history(s, "c.txt")
    with pytest.raises(NotFound):
        await port.file_at("no-such-session", "a.txt", None)


async def test_a_fork_sees_the_original_files_up_to_the_fork_point(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    s = acc.session
    turns = []
    parent = None
    for n in range(4):
        rec = await file_turn(port, s, parent, {"path": "f", "op": "write", "content": f"v{n}"})
        parent = rec.turn_id
        turns.append(rec.turn_id)
    forked = await port.fork(turns[1], "fork:f", 0)
    await file_turn(port, forked, turns[1], {"path": "f", "op": "write", "content": "mine"})
    for t in turns[:2]:
        assert await port.file_at(forked, "f", t) == await port.file_at(s, "f", t)
    assert (await port.file_at(forked, "f", None))["content"] == "mine"
    assert (await port.file_at(s, "f", None))["content"] == "v3"
    assert await port.snapshots_gc() == {"blobs": 0, "bytes": 0}  # every blob is named


async def test_over_max_bytes_is_recorded_by_hash_and_size(port: LedgerPort) -> None:
    port.snapshot_max_bytes = 10
    acc = await ingest(port, inbound("m1"))
    await file_turn(port, acc.session, None, {"path": "big", "op": "write", "content": "x" * 11})
    answer = await port.file_at(acc.session, "big", None)
    assert answer["stored"] is False and answer["bytes"] == 11 and "max_bytes" in answer["note"]
    assert answer["sha256"] == hashlib.sha256(b"x" * 11).hexdigest()
