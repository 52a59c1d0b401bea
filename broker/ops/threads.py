"""Operator ops for threads, waiting items and sessions that end: `session.reset`,
`session.threads`, `item.cancel`, `session.close` (one small async function per op,
see broker/ops/table.py).

`session.reset` decides the new thread in the ledger first, then hands it to the
session's actor, which begins it before its next turn: never under a turn.
`item.cancel` asks the session's actor first, in one step of the event loop: an item
the actor took into a turn answers `conflict`; one it held waiting has left its queue
and can no longer run. The ledger then records it `cancelled` (or answers `not_found`
/ `conflict` from what it holds).
`session.close` is decided by the ledger alone, in one transaction: a session with
anything pending (a running or queued item, a live timer) answers `conflict` naming
it and stays open, so no turn ever commits into a closed session. Given no summary,
an active session's own engine is asked for one first (broker/mailbox/closing.py),
bounded by the engine's timeout; without it the ledger writes the mechanical one.
"""

from __future__ import annotations

from typing import Any

from broker.connection import Connection
from broker.mailbox.closing import engine_summary
from broker.mailbox.registry import Mailboxes
from ledger.port.errors import Conflict
from ledger.port.protocols import LedgerPort
from plumbing import logs
from plumbing.ids import now_ms
from wire.frames import ArgSpec, check_args
from wire.framing import ProtocolError

log = logs.get("broker.ops")


class ThreadOps:
    def __init__(self, ledger: LedgerPort, mailboxes: Mailboxes | None) -> None:
        self.ledger = ledger
        self.mailboxes = mailboxes
        self.table = {
            "session.reset": self.session_reset,
            "session.threads": self.session_threads,
            "item.cancel": self.item_cancel,
            "session.close": self.session_close,
        }

    async def session_reset(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args, (ArgSpec("session", str, True), ArgSpec("reason", str, False, 1000)), req
        )
        if self.mailboxes is None:
            raise ProtocolError("internal", "the mailboxes are not running", req=req)
        label = await self.ledger.resolve_session(a["session"])
        try:
            thread = await self.ledger.reset_session(label, "operator", now_ms())
        except Conflict as exc:  # a closed session
            raise ProtocolError("conflict", str(exc), field="session", req=req) from exc
        self.mailboxes.begin_thread(label, thread, "operator")
        log.info(
            "thread reset",
            session=label,
            thread=thread,
            previous=thread - 1,
            reason="operator",
            note=a.get("reason"),
        )
        return {"label": label, "thread": thread}

    async def session_threads(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (ArgSpec("session", str, True),), req)
        label = await self.ledger.resolve_session(a["session"])
        return await self.ledger.list_threads(label)

    async def item_cancel(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (ArgSpec("session", str, True), ArgSpec("item", str, True, 64)), req)
        label, item = await self.ledger.resolve_session(a["session"]), a["item"]
        held = self.mailboxes.cancel(label, item) if self.mailboxes is not None else "absent"
        if held == "running":
            raise ProtocolError(
                "conflict", f"item {item!r} is running: only a waiting item can be cancelled",
                field="item", req=req,
            )  # fmt: skip
        try:
            await self.ledger.cancel_item(label, item, now_ms())
        except Conflict as exc:
            raise ProtocolError("conflict", str(exc), field="item", req=req) from exc
        log.info("item cancelled", session=label, item=item)
        return {"item": item, "status": "cancelled"}

    async def session_close(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args, (ArgSpec("session", str, True), ArgSpec("summary", str, False, 20_000)), req
        )
        summary: str | None = a.get("summary")
        asked = False
        if (summary is None or not summary.strip()) and self.mailboxes is not None:
            label = await self.ledger.resolve_session(a["session"])
            if (await self.ledger.session_show(label, 1)).get("status") == "active":
                ports = self.mailboxes.ports
                summary = await engine_summary(
                    self.ledger, ports.settings, ports.engine_for, ports.counter, label
                )
                asked = summary is not None
        try:
            closed = await self.ledger.close_session(a["session"], summary, now_ms())
        except Conflict as exc:
            raise ProtocolError("conflict", str(exc), field="session", req=req) from exc
        if asked:
            closed["source"] = "engine"
        log.info("session closed", session=closed["session"], summary_source=closed["source"])
        return closed
