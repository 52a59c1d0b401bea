"""The contexts of the sessions whose last turn ran on this node, kept for their next.

On the local runtime a session's actor keeps its thread between turns. On the
Temporal runtime each turn is an activity with an actor of its own
(broker/runtime/temporal/activities.py), which would load the thread from the ledger
again every turn; the node keeps what the last actor left instead, and
`SessionPorts.load` hands it to the next actor of the session.

A kept context is used only while the ledger's head is still the head the turn that
kept it committed (`LedgerPort.session_start(known_head=...)`, read with the session's
row, which every turn reads anyway): a turn on another node, a `/new`, a compaction, a
crash recorded as aborted each move the head, and the next turn loads the thread
again. A head's thread never changes, so the kept context is what a load builds. One
actor holds a context at a time: loading takes it out, and only an actor whose turn
ended without an error puts one back (its facts then hold only what the ledger
committed). At most `limit` sessions are kept; the least recently used leaves first.
"""

from __future__ import annotations

from collections import OrderedDict

from broker.context.session import SessionContext

MAX_WARM = 2048


class WarmThreads:
    def __init__(self, limit: int = MAX_WARM) -> None:
        self.limit = limit
        self._kept: OrderedDict[str, tuple[str, SessionContext]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def take(self, label: str) -> tuple[str, SessionContext] | None:
        """The session's kept head and context, no longer kept."""
        return self._kept.pop(label, None)

    def keep(self, label: str, head: str, ctx: SessionContext) -> None:
        self._kept[label] = (head, ctx)
        self._kept.move_to_end(label)
        while len(self._kept) > self.limit:
            self._kept.popitem(last=False)
