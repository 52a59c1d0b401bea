"""The audit trail's ops: `audit.list`, and `Audited`, which every op runs inside.

`Audited.run` decides the peer's role before the op reads anything, answers
`forbidden` for an op above it (with an audit row of the refusal), and has an op
that changes something carry its audit row in its first write (ledger/audit.py
`ACTING`), so the row commits with the change. An op of `operate` or `admin` that
made no write of its own (its change is made by a session's actor, as
`session.compact`'s) gets its row in a write of its own once it returns.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from broker.config import OperatorSettings, Settings
from broker.connection import Connection
from broker.ops import roles
from ledger.port import audit
from ledger.port.audit import Outcome
from ledger.port.errors import LedgerWriteFailed, WriterClosed, WriterOverloaded
from ledger.port.protocols import LedgerPort
from plumbing import logs
from plumbing.ids import now_ms
from wire.frames import ArgSpec, check_args
from wire.framing import ProtocolError

log = logs.get("broker.ops")


class Audited:
    def __init__(self, ledger: LedgerPort, settings: Callable[[], Settings | None]) -> None:
        self.ledger = ledger
        self.settings = settings  # the daemon's, as the last reload left them
        self.daemon_uid = os.getuid()

    def role(self, conn: Connection) -> roles.Role:
        s = self.settings()
        ops = s.operators if s is not None else OperatorSettings()
        return roles.role_of(conn.uid, ops.default_role, ops.roles(), self.daemon_uid)

    @asynccontextmanager
    async def run(
        self, conn: Connection, op: str, args: dict[str, Any], req: str | None
    ) -> AsyncIterator[None]:
        role, need = self.role(conn), roles.needed(op, args)
        target = roles.target_of(op, args)
        if not roles.allows(role, need):
            log.warning(
                "op refused: above the peer's role", op=op, uid=conn.uid, role=role, need=need
            )
            await self._append(op, target, "refused", conn.uid, role, now_ms())
            raise ProtocolError(
                "forbidden",
                f"{op} needs the role {need!r}; this connection (uid {conn.uid}) has {role!r}",
                field="op",
                req=req,
            )
        if need == "read":
            yield
            return
        async with self.recorded(op, target, conn.uid, role):
            yield

    @asynccontextmanager
    async def recorded(
        self, op: str, target: str | None, uid: int | None, role: str
    ) -> AsyncIterator[None]:
        """Record the change an op makes inside the block (its role already checked, by
        `run` or by the web console's token): its first write carries the row."""
        acting = audit.Acting(op, target, uid, role)
        token = audit.ACTING.set(acting)
        try:
            yield
        finally:
            audit.ACTING.reset(token)
            row = acting.take()  # closes it: a task the op started carries nothing later
        if row is not None:
            await self._append(op, target, "ok", uid, role, row.at)

    async def _append(
        self, op: str, target: str | None, outcome: Outcome, uid: int | None, role: str, at: int
    ) -> None:
        try:
            await self.ledger.audit(
                op=op, target=target, outcome=outcome, uid=uid, role=role, now=at
            )
        except (WriterOverloaded, WriterClosed, LedgerWriteFailed) as exc:
            # The op's answer stands; the log line is its record then.
            log.error("audit row not written", op=op, uid=uid, outcome=outcome, error=str(exc))


class AuditOps:
    def __init__(self, ledger: LedgerPort) -> None:
        self.ledger = ledger
        self.table = {"audit.list": self.audit_list}

    async def audit_list(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args,
            (
                ArgSpec("since", int, False, minimum=0),
                ArgSpec("op", str, False, 64),
                ArgSpec("limit", int, False, minimum=1, maximum=10_000),
            ),
            req,
        )
        return await self.ledger.audit_list(a.get("since"), a.get("op"), a.get("limit", 100))
