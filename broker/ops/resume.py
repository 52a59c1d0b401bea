"""`person.sessions`: a person's sessions and threads, to pick one to resume
(ledger/resume.py says which; see table.py for the op conventions). An unknown entity
answers `not_found` naming it."""

from __future__ import annotations

from typing import Any

from broker.connection import Connection
from ledger.port.protocols import LedgerPort
from wire.frames import ArgSpec, check_args


class ResumeOps:
    def __init__(self, ledger: LedgerPort) -> None:
        self.ledger = ledger
        self.table = {"person.sessions": self.person_sessions}

    async def person_sessions(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args,
            (
                ArgSpec("entity", str, True, 64),
                ArgSpec("limit", int, False, minimum=1, maximum=1000),
            ),
            req,
        )
        return await self.ledger.person_sessions(a["entity"], a.get("limit", 50))
