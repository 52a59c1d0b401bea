"""The audit trail as the shell sees it (`ledger/audit.py`, migration 0023_audit).

A row records an operator op that changed something or was refused, or a refused
agent tool call; it names what was acted on and never holds message text, tool
arguments or secrets. A change records itself inside its own transaction: a job of
the ledger calls `ledger.audit.append(conn, ...)` before it returns (the function
that the erasure of a person uses too). `audit` is for what has no transaction of
its own: a refusal, which changes nothing else.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

from plumbing.ids import now_ms

Outcome = Literal["ok", "refused"]


# -- an op's row, carried by the op's first write --------------------------------


class Row(NamedTuple):  # a named tuple: it goes to the writer process with the job
    at: int
    op: str
    target: str | None
    uid: int | None
    role: str | None


@dataclass(slots=True)
class Acting:
    """An operator op being run, whose row its first write job carries (`take`)."""

    op: str
    target: str | None
    uid: int | None
    role: str | None
    carried: bool = False

    def take(self) -> Row | None:
        """The row for the first write submitted while the op runs; None after it."""
        if self.carried:
            return None
        self.carried = True
        return Row(now_ms(), self.op, self.target, self.uid, self.role)


# Set around an operator op that changes something (broker/ops/audit.py); the
# writer reads it when a job is submitted (ledger/writer/group_commit.py).
ACTING: ContextVar[Acting | None] = ContextVar("audit_acting", default=None)


class AuditPort(Protocol):
    async def audit(
        self,
        *,
        op: str,
        target: str | None,
        outcome: Outcome,
        uid: int | None,
        role: str | None,
        now: int,
    ) -> None:
        """Append one audit row in a transaction of its own, and wait for its commit."""
        ...

    async def audit_list(
        self, since: int | None, op: str | None, limit: int
    ) -> list[dict[str, Any]]:
        """`audit.list`: the latest `limit` rows at or after `since` (ms), of `op` if
        given, oldest first: `{"at","uid","role","op","target","outcome"}`."""
        ...
