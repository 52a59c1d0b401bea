"""Operator ops for the session-state record (`session.state`), and the hand-over of
an entity merge's bridge notes to a live actor (see ops.py for the op conventions)."""

from __future__ import annotations

from typing import Any

from broker.connection import Connection
from broker.mailbox.registry import Mailboxes
from ledger.port.protocols import LedgerPort
from ledger.port.records import MergeResult
from wire.frames import ArgSpec, check_args


class StateOps:
    """`session.state`: the record of the session's current thread (seed 003)."""

    def __init__(self, ledger: LedgerPort) -> None:
        self.ledger = ledger
        self.table = {"session.state": self.session_state}

    async def session_state(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (ArgSpec("session", str, True),), req)
        return await self.ledger.session_state(a["session"])


def hand_bridges(mailboxes: Mailboxes | None, result: MergeResult) -> None:
    """A live actor of the merge's primary session learns of the new bridge notes now
    (`Mailboxes.merged`, which a chat command's merge calls too)."""
    if mailboxes is not None:
        mailboxes.merged(result)
