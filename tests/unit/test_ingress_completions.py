"""The ingress's completion task (ingress.py): filed messages are answered in
the order they were written, from the ingress's own task once the writer resolves
them; a full channel makes the next reader wait before it writes anything."""

from __future__ import annotations

from typing import Any, cast

import anyio
import anyio.lowlevel
import orjson
import pytest

from broker import ingress as ingress_module
from broker.config import Settings
from broker.connection import Connection
from broker.ingress import Ingress
from broker.router import Router
from ledger.port.errors import LedgerWriteFailed
from ledger.port.protocols import IngestPort, SessionSpec
from ledger.port.records import Accepted, InboundRecord
from ledger.writer.jobs import JobSpec, Pending

pytestmark = pytest.mark.anyio


class Ledger:
    """Keeps what is submitted; the test resolves it, as the writer's receiver would."""

    write_failure = None

    def __init__(self) -> None:
        self.submitted: list[tuple[str, Pending[Accepted]]] = []
        self.batch_done = anyio.Event()

    async def admit(self) -> None:
        pass  # always room: this ledger's queue is the test's list

    def submit_inbound(self, rec: InboundRecord, spec: SessionSpec, now: int) -> Pending[Any]:
        pending: Pending[Any] = Pending(JobSpec(print, (), {}), lambda: self.batch_done)
        self.submitted.append((rec.msg_id, pending))
        return pending

    def resolve(self, upto: int, error: BaseException | None = None) -> None:
        """Resolve the first `upto` submissions, as one commit."""
        for n, (msg_id, pending) in enumerate(self.submitted[:upto]):
            if not pending.done:
                accepted = Accepted(msg_id, "dm:ann", f"item-{msg_id}", False, n + 1, "e")
                pending._resolve(None if error else accepted, error)
        self.batch_done.set()
        self.batch_done = anyio.Event()


class Conn:
    id, channel, frame_bytes, closed = "c1", "chat", 100, False

    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []

    def post(self, data: bytes) -> bool:
        self.posted.append(orjson.loads(data))
        return True


def frame(n: int) -> dict[str, Any]:
    return {"type": "inbound", "msg_id": f"m{n}", "sender_id": "ann", "peer_kind": "dm",
            "text": f"hello {n}", "req": f"r{n}"}  # fmt: skip


async def settle() -> None:
    for _ in range(10):
        await anyio.lowlevel.checkpoint()


async def test_answers_leave_in_written_order_once_resolved_and_a_full_channel_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ingress_module, "FILED_BUFFER", 2)
    ledger, conn, handed = Ledger(), Conn(), list[str]()
    ingress = Ingress(
        Settings(),
        cast(IngestPort, ledger),
        Router((), frozenset()),
        lambda acc, rec: handed.append(rec.msg_id),
    )
    ingress.attach(cast(Connection, conn))
    async with anyio.create_task_group() as tg:
        await tg.start(ingress.run)
        for n in range(3):  # the task takes one; two fill the channel
            await ingress.handle(cast(Connection, conn), frame(n))
            await settle()
        filed_fourth = anyio.Event()

        async def reader() -> None:
            await ingress.handle(cast(Connection, conn), frame(3))
            filed_fourth.set()

        tg.start_soon(reader)
        await settle()
        assert not filed_fourth.is_set() and len(ledger.submitted) == 3  # waits, unwritten
        assert conn.posted == [] and handed == []  # nothing before the commit
        ledger.resolve(2)
        await settle()
        assert [f["msg_id"] for f in conn.posted] == ["m0", "m1"]
        assert handed == ["m0", "m1"]
        assert filed_fourth.is_set() and len(ledger.submitted) == 4  # room: written now
        ledger.resolve(4)
        await settle()
        assert [(f["type"], f["req"]) for f in conn.posted] == [("ack", f"r{n}") for n in range(4)]
        assert handed == ["m0", "m1", "m2", "m3"]
        assert ingress.pending_bytes == 0 and ingress.adapters["c1"].inflight == 0
        tg.cancel_scope.cancel()


async def test_a_message_whose_write_failed_is_answered_with_an_error_and_not_handed_on() -> None:
    ledger, conn, handed = Ledger(), Conn(), list[str]()
    ingress = Ingress(
        Settings(),
        cast(IngestPort, ledger),
        Router((), frozenset()),
        lambda acc, rec: handed.append(rec.msg_id),
    )
    ingress.attach(cast(Connection, conn))
    async with anyio.create_task_group() as tg:
        await tg.start(ingress.run)
        await ingress.handle(cast(Connection, conn), frame(0))
        ledger.resolve(1, LedgerWriteFailed("disk full"))
        await settle()
        [answer] = conn.posted
        assert (answer["type"], answer["code"], answer["req"]) == ("error", "internal", "r0")
        assert "not stored" in answer["message"] and handed == []
        assert ingress.pending_bytes == 0 and ingress.adapters["c1"].inflight == 0
        tg.cancel_scope.cancel()
