"""Expiry through the port: old turns become stubs, to the bytes on SQLite; the head and
the latest compaction stay whole, and the session goes on from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.port.protocols import LedgerPort
from ledger.sqlite.store import Ledger
from plumbing.ids import new_id
from tests.conformance.records import inbound, ingest, tick, turn
from tests.conformance.test_erasure import pg_analyze, pg_table_bytes

pytestmark = pytest.mark.anyio


def raw_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


async def test_expiry_leaves_stubs_and_keeps_what_the_session_goes_on_from(
    port: LedgerPort, ledger_backend: str, request: pytest.FixtureRequest
) -> None:
    marker = f"zqx{new_id().lower()}"
    acc = await ingest(port, inbound("m1", text=f"old words {marker}"))
    first = turn(
        acc.session,
        None,
        await port.open_items(acc.session),
        f"old reply {marker}",
        outbox_channel="chat",
    )
    first.events = [("file", {"path": "a.txt", "op": "write", "content": f"{marker}\n"})]
    await port.submit_turn(first).result()
    assert first.outbox is not None
    await port.submit_delivered([first.outbox[0]], tick()).result()
    summary = turn(
        acc.session,
        first.turn_id,
        [],
        "",
        kind="compaction",
        compaction={
            "summary": "they greeted us",
            "summarized_through_turn_id": first.turn_id,
            "first_kept_turn_id": None,
            "turns_summarized": 1,
            "trigger": "manual",
        },
    )
    await port.submit_turn(summary).result()
    b = await ingest(port, inbound("m2", text="newer words"))
    head = turn(acc.session, summary.turn_id, await port.open_items(b.session), "newer reply")
    await port.submit_turn(head).result()
    other = await ingest(port, inbound("o1", sender="olga", text=f"olga {marker}"))
    o_turn = turn(other.session, None, await port.open_items(other.session), "hi olga")
    await port.submit_turn(o_turn).result()
    path = port.path if isinstance(port, Ledger) and port.backend == "sqlite" else None
    if path is not None:
        assert b"old words" in raw_bytes(path) and b"old reply" in raw_bytes(path)
    if ledger_backend == "postgres":
        pg_analyze(request)  # its sample values of the columns stay out of the catalog
        assert b"old words" in pg_table_bytes(request)

    cutoff = tick()
    assert await port.expire_before(cutoff, tick()) == 1  # the first turn alone
    assert await port.expire_before(cutoff, tick()) == 0

    shown = await port.session_show(acc.session, 10)
    assert [t["id"] for t in shown["turns"]] == [first.turn_id, summary.turn_id, head.turn_id]
    stub = shown["turns"][0]
    assert (stub["type"], stub["status"], stub["output"], stub["title"]) == (
        "turn",
        "completed",
        None,
        None,
    )
    assert shown["head"] == head.turn_id
    assert [h.session for h in await port.recall_search(marker, None, 10)] == [other.session]
    start = await port.session_start(acc.session)
    assert start.thread is not None and start.thread.summary == "they greeted us"
    c = await ingest(port, inbound("m3", text="and on"))
    more = turn(acc.session, head.turn_id, await port.open_items(c.session), "on it goes")
    await port.submit_turn(more).result()
    assert (await port.session_show(acc.session, 10))["head"] == more.turn_id
    if path is not None:
        data = raw_bytes(path)
        # olga's turn (the head of her session) keeps her words; the expired turn's go.
        assert b"old words" not in data and b"old reply" not in data
        assert f"old reply {marker}".encode() not in data
        assert f"old words {marker}".encode() not in data
    if ledger_backend == "postgres":
        data = pg_table_bytes(request)
        assert f"old reply {marker}".encode() not in data
        assert f"old words {marker}".encode() not in data


async def two_turns(port: LedgerPort, sender: str) -> tuple[str, str, str]:
    """A session of `sender` with an old turn and a head: (session, old, head)."""
    acc = await ingest(port, inbound(f"{sender}1", sender=sender, text=f"{sender} long ago"))
    old = turn(acc.session, None, await port.open_items(acc.session), "then")
    await port.submit_turn(old).result()
    await ingest(port, inbound(f"{sender}2", sender=sender, text=f"{sender} lately"))
    head = turn(acc.session, old.turn_id, await port.open_items(acc.session), "now")
    await port.submit_turn(head).result()
    return acc.session, old.turn_id, head.turn_id


async def test_each_session_expires_at_its_own_cutoff(port: LedgerPort) -> None:
    """A route rule's own keep_days reaches the ledger as a session's own cutoff: older
    than the global one, None (kept forever), or none (the global one)."""
    ann, ann_old, _ = await two_turns(port, "ann")
    bob, _, _ = await two_turns(port, "bob")
    cy, cy_old, _ = await two_turns(port, "cy")
    routes = {r.label: r for r in await port.session_routes()}
    assert (routes[ann].channel, routes[ann].peer_kind, routes[ann].sender_id) == (
        "chat",
        "dm",
        "ann",
    )
    assert routes[ann].parent is None
    now = tick()
    assert await port.expire_before(None, now, {ann: now, bob: None}) == 1  # ann's alone
    assert await port.expire_before(now, tick(), {bob: None}) == 1  # cy's now; bob kept
    expired = {
        t["id"]
        for label in (ann, bob, cy)
        for t in (await port.session_show(label, 10))["turns"]
        if t["output"] is None
    }
    assert expired == {ann_old, cy_old}
