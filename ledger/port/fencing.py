"""The fence a running clustered turn puts on its writes: its session lease's taking.

While an attempt holds its session's lease (broker/runtime/temporal/session_lease.py)
every job its tasks submit to the ledger writer carries the lease's token, and the
job's transaction first checks that this token still holds the lease (ledger/leases.py,
`fenced`): a write of an attempt that another attempt has since taken the lease from
changes nothing and fails with `LeaseFenced`, however long it waited in a paused
node's writer. Lazy jobs and jobs run last (delivery confirmations, hand-offs, lease
renewals and releases) commute with every other write and are not fenced. The local
runtime never sets a fence, so its writes carry nothing and cost nothing more.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(slots=True)
class Fence:
    """One taking of a session's lease, as its attempt's writes carry it."""

    session: str
    token: int
    # Told, in the writer's task and at once, when a write was refused; must not block.
    on_refused: Callable[[], None]
    active: bool = True  # off once the attempt's hold ended: a task it left behind
    # (one that outlived the turn) writes unfenced, as any node-wide task does


# Set around the body of an attempt holding its lease (session_lease.py); the writer
# reads it when a job is submitted (ledger/writer/group_commit.py).
FENCE: ContextVar[Fence | None] = ContextVar("lease_fence", default=None)
