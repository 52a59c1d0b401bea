"""What the shell asks of a ledger to expire old turns (`[retention] keep_days`).

An expiry runs in bounded batches through the writer, so other sessions' writes
pass between them, and returns once the expired turns' rows and their bytes are
gone. Running it again expires nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol


class SessionRoute(NamedTuple):
    """A session, and what routed its latest message in (None: no message came in)."""

    label: str
    parent: str | None
    channel: str | None
    peer_kind: str | None
    sender_id: str | None


class RetentionPort(Protocol):
    async def expire_before(
        self, cutoff: int | None, now: int, cutoffs: Mapping[str, int | None] | None = None
    ) -> int:
        """Turn every turn that ended before its session's cutoff (ms: its own in
        `cutoffs`, else `cutoff`; None keeps them) into a stub, but the turns a session
        goes on from (ledger/retention.py); how many it expired."""
        ...

    async def session_routes(self) -> list[SessionRoute]:
        """Every session with what routed its latest message in, for the route rules'
        own `keep_days`."""
        ...
