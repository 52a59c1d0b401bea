"""Deliveries.pick remembers each session's adapter; the choice must always equal
rendezvous hashing over the channel's open adapters at that moment."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, cast

import anyio
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.connection import Connection
from broker.deliveries import Deliveries
from ledger.port.protocols import DeliveryPort


@dataclass(eq=False)
class FakeConn:
    id: str
    channel: str
    closed: bool = False


class NoBacklog:
    async def pending_outbox(self, channel: str, limit: int, after: Any = None) -> list[Any]:
        return []


def picked(deliveries: Deliveries, channel: str, session: str) -> object:
    return deliveries.pick(channel, session)


def expected(conns: list[FakeConn], session: str) -> FakeConn | None:
    open_ = [c for c in conns if not c.closed]
    if not open_:
        return None
    key = session.encode()
    return max(open_, key=lambda c: zlib.crc32(key, zlib.crc32(c.id.encode())))


ops = st.lists(
    st.one_of(
        st.tuples(st.just("connect"), st.sampled_from(["a", "b"])),
        st.tuples(st.just("close"), st.integers(0, 20)),
        st.tuples(st.just("gone"), st.integers(0, 20)),
        st.tuples(st.just("pick"), st.sampled_from(["a", "b"]), st.integers(0, 4)),
    ),
    max_size=60,
)


@settings(max_examples=500, deadline=None)
@given(ops)
@example([("connect", "a"), ("pick", "a", 2), ("connect", "a"), ("pick", "a", 2)])
def test_pick_always_matches_rendezvous_hashing(script: list[tuple[Any, ...]]) -> None:
    deliveries = Deliveries(cast(DeliveryPort, NoBacklog()))
    made: list[FakeConn] = []
    for op in script:
        if op[0] == "connect":
            conn = FakeConn(f"conn-{len(made)}", op[1])
            made.append(conn)
            anyio.run(deliveries.adapter_connected, cast(Connection, conn))
        elif op[0] in ("close", "gone") and made:
            conn = made[op[1] % len(made)]
            conn.closed = True
            if op[0] == "gone":
                deliveries.adapter_gone(cast(Connection, conn))
        elif op[0] == "pick":
            channel, session = op[1], f"dm:s{op[2]}"
            members = [c for c in made if c.channel == channel]
            got = picked(deliveries, channel, session)
            assert got is expected(members, session)


def test_a_new_adapter_takes_over_the_sessions_it_wins() -> None:
    deliveries = Deliveries(cast(DeliveryPort, NoBacklog()))
    first = FakeConn("conn-first", "chat")
    anyio.run(deliveries.adapter_connected, cast(Connection, first))
    sessions = [f"dm:s{i}" for i in range(50)]
    assert all(picked(deliveries, "chat", s) is first for s in sessions)
    second = FakeConn("conn-second", "chat")
    anyio.run(deliveries.adapter_connected, cast(Connection, second))
    moved = [s for s in sessions if picked(deliveries, "chat", s) is second]
    assert moved and len(moved) < len(sessions)  # some, not all, move to the newcomer
    assert all(picked(deliveries, "chat", s) is expected([first, second], s) for s in sessions)


def test_replies_go_back_to_the_adapter_a_session_was_heard_from() -> None:
    """An adapter may serve one person only (a terminal): a session's replies go to
    the connection its latest message came from, while it is open, whoever
    connects meanwhile; then rendezvous hashing again."""
    deliveries = Deliveries(cast(DeliveryPort, NoBacklog()))
    first, second = FakeConn("conn-first", "chat"), FakeConn("conn-second", "chat")
    for conn in (first, second):
        anyio.run(deliveries.adapter_connected, cast(Connection, conn))
    sessions = [f"dm:s{i}" for i in range(20)]
    hashed_to_first = [s for s in sessions if expected([first, second], s) is first]
    for s in hashed_to_first:
        deliveries.heard_from(cast(Connection, second), s)
    third = FakeConn("conn-third", "chat")
    anyio.run(deliveries.adapter_connected, cast(Connection, third))
    assert all(picked(deliveries, "chat", s) is second for s in hashed_to_first)
    second.closed = True
    deliveries.adapter_gone(cast(Connection, second))
    assert all(
        picked(deliveries, "chat", s) is expected([first, third], s) for s in hashed_to_first
    )
