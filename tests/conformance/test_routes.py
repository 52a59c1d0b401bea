"""Route bindings through the port: a bound conversation's messages land in the bound
session from its next message on, refusals write nothing, and `/fork` is one
transaction with its command's reply."""

from __future__ import annotations

import orjson
import pytest

from ledger.port.errors import Conflict, NotFound
from ledger.port.protocols import BindCommand, Conversation, LedgerPort
from plumbing.ids import new_id
from tests.conformance.records import inbound, ingest, tick, turn

pytestmark = pytest.mark.anyio
ALICE = Conversation("chat", "dm", "alice", None)


async def _talk(port: LedgerPort, sender: str, msg_id: str) -> tuple[str, str]:
    """A message and its committed turn: (session, turn)."""
    acc = await ingest(port, inbound(msg_id, sender=sender))
    head = (await port.session_start(acc.session)).start.head
    rec = turn(acc.session, head, await port.open_items(acc.session))
    await port.submit_turn(rec).result()
    return acc.session, rec.turn_id


async def test_a_bound_conversation_files_into_its_session_until_unbound(
    port: LedgerPort,
) -> None:
    home, first = await _talk(port, "alice", "a1")
    fork = await port.fork(first, None, tick())
    assert (await ingest(port, inbound("a2"))).session == home  # the route is cached now
    assert await port.route_bind(ALICE, fork, tick()) == fork
    assert (await ingest(port, inbound("a3"))).session == fork
    assert [b["session"] for b in await port.route_list(fork)] == [fork]
    assert await port.route_unbind(ALICE) == fork
    assert (await ingest(port, inbound("a4"))).session == home
    with pytest.raises(NotFound):
        await port.route_unbind(ALICE)


async def test_a_bind_to_another_persons_session_or_an_unknown_one_writes_nothing(
    port: LedgerPort,
) -> None:
    await _talk(port, "alice", "a1")
    bob, bobs_turn = await _talk(port, "bob", "b1")
    bobs_fork = await port.fork(bobs_turn, None, tick())
    for target in (bob, bobs_fork):
        with pytest.raises(Conflict) as refused:
            await port.route_bind(ALICE, target, tick())
        assert refused.value.field == "session"
    with pytest.raises(NotFound):
        await port.route_bind(ALICE, "dm:nobody", tick())
    with pytest.raises(NotFound) as unheard:
        await port.route_bind(Conversation("chat", "dm", "carol", None), bob, tick())
    assert unheard.value.field == "peer_id"
    assert await port.route_list(None) == []


async def test_a_fork_command_forks_binds_and_answers_in_one_transaction(
    port: LedgerPort,
) -> None:
    home, first = await _talk(port, "alice", "a1")
    command = await ingest(port, inbound("a2", text="/fork"))
    frame = orjson.dumps({"type": "deliver", "session": home, "text": ""}).decode()
    cmd = BindCommand("fork", command.item, home, ALICE, None, new_id(), frame)
    sent = orjson.loads(await port.submit_chat_bind(cmd, tick()).result())
    fork = (await port.route_list(None))[0]["session"]
    assert fork.startswith("fork:") and fork in sent["text"]
    assert (await port.session_start(fork)).start.head == first
    assert await port.open_items(home) == []  # the command item is done
    assert (await ingest(port, inbound("a3"))).session == fork
    rows = await port.pending_outbox("chat", 10)
    assert [orjson.loads(r.frame)["text"] for r in rows] == [sent["text"]]
