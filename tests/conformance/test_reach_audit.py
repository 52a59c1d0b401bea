"""Reach and the audit trail through the port (issue 39): a broker tool's dispatch or
recall past its turn's reach is refused in its own transaction with one sentence for
"not yours" and "no such session", changing nothing but the refusal's audit row; an
operator op's row rides in its first write; `audit.list` reads them back."""

from __future__ import annotations

import pytest

from core.reach import REFUSED
from ledger.port import audit
from ledger.port.errors import NotFound, NotReachable
from ledger.port.protocols import LedgerPort
from ledger.port.records import Limits, Reaching, Request
from tests.conformance.records import inbound, ingest, tick, turn

pytestmark = pytest.mark.anyio
LIMITS = Limits(max_depth=2, max_children=8, timeout_ms=60_000)


async def _person(port: LedgerPort, sender: str) -> tuple[str, str]:
    acc = await ingest(port, inbound(f"m-{sender}", sender=sender, text=f"{sender} was here"))
    rec = turn(acc.session, None, await port.open_items(acc.session), "hello")
    await port.submit_turn(rec).result()
    return acc.session, rec.turn_id


async def test_a_dispatch_past_reach_is_refused_and_audited(port: LedgerPort) -> None:
    alice, alice_turn = await _person(port, "alice")
    bob, bob_turn = await _person(port, "bob")
    by = Reaching(alice, "agent_send")
    targets = [
        {"kind": "session", "session": bob},
        {"kind": "fork", "turn": bob_turn},
        {"kind": "session", "session": "dm:nobody"},
        {"kind": "fork", "turn": "no-such-turn"},
    ]
    for target in targets:
        with pytest.raises(NotReachable) as refused:
            await port.dispatch(
                parent=alice, parent_turn=alice_turn, tool_call=None, target=target, task="t",
                persona=None, limits=LIMITS, now=tick(), reaching=by,
            )  # fmt: skip
        assert str(refused.value) == REFUSED
    assert await port.workers_list(alice, None) == []
    assert sorted(s["label"] for s in await port.sessions_list(None, 100)) == sorted([alice, bob])
    rows = await port.audit_list(None, None, 100)
    assert [(r["op"], r["target"], r["outcome"], r["uid"]) for r in rows] == [
        ("agent_send", alice, "refused", None)
    ] * len(targets)
    # One's own fork and a new worker are within reach.
    done = await port.dispatch(
        parent=alice, parent_turn=alice_turn, tool_call=None, target={"kind": "fork",
        "turn": alice_turn}, task="t", persona=None, limits=LIMITS, now=tick(), reaching=by,
    )  # fmt: skip
    assert done.session.startswith("fork:")


async def test_a_recall_past_reach_is_refused_and_all_sessions_are_one_s_own(
    port: LedgerPort,
) -> None:
    alice, _ = await _person(port, "alice")
    bob, bob_turn = await _person(port, "bob")
    by = Reaching(alice, "conversation_recall")
    for req in (
        Request("summary", bob, 1, reaching=by),
        Request("summary", "dm:nobody", 1, reaching=by),
        Request("range", alice, 10, around_turn=bob_turn, reaching=by),
    ):
        with pytest.raises(NotReachable, match=REFUSED):
            await port.recall(req)
    everywhere = await port.recall(Request("search", None, 10, query="here", reaching=by))
    assert {h.session for h in everywhere.hits} == {alice}  # type: ignore[union-attr]
    operator = await port.recall(Request("search", None, 10, query="here"))
    assert {h.session for h in operator.hits} == {alice, bob}  # type: ignore[union-attr]
    # A merge widens reach from the merge on.
    await port.merge_entities(bob.removeprefix("dm:"), alice.removeprefix("dm:"), tick())
    found = await port.recall(Request("search", None, 10, query="here", reaching=by))
    assert {h.session for h in found.hits} >= {alice}  # type: ignore[union-attr]
    await port.recall(Request("summary", bob, 1, reaching=by))


async def test_an_op_s_row_rides_in_its_first_write(port: LedgerPort) -> None:
    _, alice_turn = await _person(port, "alice")
    token = audit.ACTING.set(audit.Acting("session.fork", alice_turn, 1000, "operate"))
    try:
        fork = await port.fork(alice_turn, None, tick())
        await port.fork(alice_turn, None, tick())  # a second write carries nothing
    finally:
        audit.ACTING.reset(token)
    rows = await port.audit_list(None, "session.fork", 10)
    assert [(r["uid"], r["role"], r["target"], r["outcome"]) for r in rows] == [
        (1000, "operate", alice_turn, "ok")
    ]
    assert fork.startswith("fork:")
    # A write that fails leaves no row: the change and its row commit together.
    token = audit.ACTING.set(audit.Acting("session.fork", "no-such", 1000, "operate"))
    try:
        with pytest.raises(NotFound):
            await port.fork("no-such-turn", None, tick())
    finally:
        audit.ACTING.reset(token)
    assert len(await port.audit_list(None, None, 10)) == 1


async def test_audit_list_filters_and_keeps_the_latest(port: LedgerPort) -> None:
    for n in range(5):
        op = "entity.merge" if n % 2 else "session.fork"
        await port.audit(op=op, target=f"t{n}", outcome="refused", uid=n, role="read", now=n + 1)
    rows = await port.audit_list(None, None, 3)
    assert [r["target"] for r in rows] == ["t2", "t3", "t4"]
    assert [r["target"] for r in await port.audit_list(3, None, 100)] == ["t2", "t3", "t4"]
    assert [r["target"] for r in await port.audit_list(None, "entity.merge", 100)] == ["t1", "t3"]
    assert set(rows[0]) == {"at", "uid", "role", "op", "target", "outcome"}


async def test_an_erasure_leaves_no_id_of_the_person_in_the_trail(port: LedgerPort) -> None:
    alice, alice_turn = await _person(port, "alice")
    bob, _ = await _person(port, "bob")
    entity = alice.removeprefix("dm:")
    for target in (alice, alice_turn, entity, bob):
        await port.audit(op="session.fork", target=target, outcome="ok", uid=0, role="admin",
                         now=tick())  # fmt: skip
    token = audit.ACTING.set(audit.Acting("entity.erase", entity, 0, "admin"))
    try:
        await port.erase_entity(entity, entity, tick())
    finally:
        audit.ACTING.reset(token)
    rows = await port.audit_list(None, None, 100)
    assert [(r["op"], r["target"]) for r in rows] == [
        ("session.fork", "[erased]"),
        ("session.fork", "[erased]"),
        ("session.fork", "[erased]"),
        ("session.fork", bob),
        ("entity.erase", entity),  # the record of what was erased
    ]
