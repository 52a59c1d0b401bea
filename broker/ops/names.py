"""`entity.name` and `entity.alias`: an operator names a person and leads a session
key to a session, and `entity.show` says who an entity is (ledger/names.py keeps
them; see table.py for the op conventions).

A refused one (an unknown entity or session, an empty name, an unknown kind, an
alias already taken) answers `invalid` or `not_found` naming the argument and
changes nothing.
"""

from __future__ import annotations

from typing import Any

from broker.connection import Connection
from core.identity import ALIAS_LIMIT, NAME_LIMIT
from ledger.port.protocols import LedgerPort
from plumbing import logs
from plumbing.ids import now_ms
from wire.frames import ArgSpec, check_args

log = logs.get("broker.ops")


class NameOps:
    def __init__(self, ledger: LedgerPort) -> None:
        self.ledger = ledger
        self.table = {
            "entity.show": self.entity_show,
            "entity.name": self.entity_name,
            "entity.alias": self.entity_alias,
        }

    async def entity_show(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (ArgSpec("entity", str, True, 64),), req)
        return await self.ledger.entity_show(a["entity"])

    async def entity_name(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args,
            (
                ArgSpec("entity", str, True, 64),
                ArgSpec("name", str, True, NAME_LIMIT * 2),  # trimmed to NAME_LIMIT's check
                ArgSpec("kind", str, False, 16),
            ),
            req,
        )
        named = await self.ledger.name_entity(a["entity"], a["name"], a.get("kind"), now_ms())
        log.info("entity named", entity=named["entity"], kind=named["kind"], conn=conn.id)
        return named

    async def entity_alias(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args, (ArgSpec("alias", str, True, ALIAS_LIMIT), ArgSpec("session", str, True)), req
        )
        added = await self.ledger.add_alias(a["alias"], a["session"], now_ms())
        log.info("alias added", alias=added["alias"], session=added["session"], conn=conn.id)
        return added
