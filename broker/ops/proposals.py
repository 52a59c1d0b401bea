"""`merge.list`, `merge.accept` and `merge.reject`: an operator's side of the merge
proposals agents make (`propose_merge`, ledger/proposals.py).

Accepting runs the merge `entity.merge {from: contact, into: person}` runs, in the
decision's transaction, and hands its bridge notes to a live primary as that op
does; the audit row (carried by the op, broker/ops/audit.py) names the contact. A
decided or unknown proposal answers `conflict` or `not_found` and changes nothing.
"""

from __future__ import annotations

from typing import Any

from broker.connection import Connection
from broker.mailbox.registry import Mailboxes
from broker.ops.state import hand_bridges
from ledger.port import audit
from ledger.port.errors import Conflict
from ledger.port.protocols import LedgerPort
from plumbing import logs
from plumbing.ids import now_ms
from wire.frames import ArgSpec, check_args
from wire.framing import ProtocolError

log = logs.get("broker.ops")
STATUSES = ("pending", "accepted", "rejected")


class ProposalOps:
    def __init__(self, ledger: LedgerPort, mailboxes: Mailboxes | None) -> None:
        self.ledger = ledger
        self.mailboxes = mailboxes
        self.table = {
            "merge.list": self.merge_list,
            "merge.accept": self.merge_accept,
            "merge.reject": self.merge_reject,
        }

    async def merge_list(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args,
            (
                ArgSpec("status", str, False, 16),
                ArgSpec("limit", int, False, minimum=1, maximum=1000),
            ),
            req,
        )
        status = a.get("status")
        if status is not None and status not in STATUSES:
            raise ProtocolError(
                "invalid", f"status must be one of {', '.join(STATUSES)}", field="status", req=req
            )
        return await self.ledger.merge_proposals(status, a.get("limit", 100))

    async def merge_accept(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        return await self._decide(conn, args, req, accept=True)

    async def merge_reject(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        return await self._decide(conn, args, req, accept=False)

    async def _decide(
        self, conn: Connection, args: dict[str, Any], req: str | None, *, accept: bool
    ) -> Any:
        a = check_args(args, (ArgSpec("proposal", int, True, minimum=1, maximum=2**62),), req)
        n = a["proposal"]
        acting = audit.ACTING.get()
        if acting is not None and acting.target is None:  # the row names the contact
            found = await self.ledger.merge_proposals(None, 1, n)
            acting.target = found[0]["contact"] if found else None
        try:
            decided, merged = await self.ledger.decide_merge(n, accept, f"uid:{conn.uid}", now_ms())
        except Conflict as exc:  # decided before
            raise ProtocolError("conflict", str(exc), field="proposal", req=req) from exc
        out: dict[str, Any] = {"proposal": decided}
        if merged is not None:
            hand_bridges(self.mailboxes, merged)
            out.update(canonical=merged.canonical, primary=merged.primary)
        log.info(
            "merge proposal decided",
            proposal=n,
            status=decided["status"],
            canonical=None if merged is None else merged.canonical,
            conn=conn.id,
        )
        return out
