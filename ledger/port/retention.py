"""What the shell asks of a ledger to expire old turns (`[retention] keep_days`).

An expiry runs in bounded batches through the writer, so other sessions' writes
pass between them, and returns once the expired turns' rows and their bytes are
gone. Running it again expires nothing twice.
"""

from __future__ import annotations

from typing import Protocol


class RetentionPort(Protocol):
    async def expire_before(self, cutoff: int, now: int) -> int:
        """Turn every turn that ended before `cutoff` (ms) into a stub, but the turns a
        session goes on from (ledger/retention.py); how many it expired."""
        ...
