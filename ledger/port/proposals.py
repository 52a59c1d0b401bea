"""What the shell asks of a ledger for merge proposals (ledger/proposals.py keeps
them): an agent proposes, an operator or an owner decides, anyone with `read` lists.

A refused proposal (past the turn's reach) answers None and changes nothing but its
audit row; a refused decision (`NotFound`, `Conflict`) changes nothing.
"""

from __future__ import annotations

from typing import Any, Protocol

from ledger.port.committing import Committing
from ledger.port.records import MergeCommand, MergeResult, Reaching


class ProposalsPort(Protocol):
    async def propose_merge(
        self, by: Reaching, turn: str | None, contact: str, person: str, reason: str, now: int
    ) -> dict[str, Any] | None:
        """Record that `contact` is `person`: the proposal (`{"proposal", "contact",
        "person", "reason", "session", "status", ...}`), or None: refused, audited."""
        ...

    async def decide_merge(
        self, proposal: int, accept: bool, by: str, now: int
    ) -> tuple[dict[str, Any], MergeResult | None]:
        """Accept (and merge) or reject proposal `proposal`: it, and the merge run."""
        ...

    def submit_chat_merge(
        self, cmd: MergeCommand, now: int
    ) -> Committing[tuple[str, MergeResult | None]]:
        """An owner's `/merge`: the reply's frame as sent, and the merge run if any."""
        ...

    async def merge_proposals(
        self, status: str | None, limit: int, proposal: int | None = None
    ) -> list[dict[str, Any]]:
        """The newest `limit` proposals, oldest first (of `status`; or number `proposal`)."""
        ...
