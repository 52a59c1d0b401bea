"""Operator ops for workers (`workers.list`): one small async function per op (see ops.py)."""

from __future__ import annotations

from typing import Any

from broker.connection import Connection
from ledger.port.protocols import LedgerPort
from wire.frames import ArgSpec, check_args


class WorkerOps:
    """`workers.list {session, turn?}`: the workers a session (or one of its turns)
    dispatched, oldest first (ledger/workers.py)."""

    def __init__(self, ledger: LedgerPort) -> None:
        self.ledger = ledger
        self.table = {"workers.list": self.workers_list}

    async def workers_list(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (ArgSpec("session", str, True), ArgSpec("turn", str, False, 64)), req)
        return await self.ledger.workers_list(a["session"], a.get("turn"))
