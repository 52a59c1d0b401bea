"""New threads as a session's actor begins them: `/new`, `/reset`, `session.reset` and
the automatic rollovers decided at ingest (ledger/resets.py).

A request becomes the lifecycle's `NewThread`, so the cut never runs under a turn
(core/lifecycle.py); `cut` performs its `StartNewThread`. A request for a numbered
thread is taken once, though the registry's post and the actor's start (a pending
thread in the ledger) may both bring it; while a cut waits, a later request replaces
it. An automatic rollover carries the old thread's latest compaction summary into a
compaction turn at the new thread's root (its state record is carried by the ledger:
ledger/threads.py); an explicit reset starts empty.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.mailbox.ports import ActorPorts
from broker.mailbox.session_facts import SessionFacts
from core.resets import AUTOMATIC
from ledger.port.records import Carry
from plumbing.ids import new_id


@dataclass(frozen=True, slots=True)
class ThreadRequest:
    thread: int | None  # the pending thread to begin; None: a new one, decided at the cut
    reason: str  # new | operator | idle | daily | turn_limit
    from_seq: int = 0  # the seq of the message that decided it; 0: none (lifecycle)

    @property
    def carries(self) -> bool:
        return self.reason in AUTOMATIC


EXPLICIT_NEW = ThreadRequest(None, "new")


class ThreadCuts:
    def __init__(self, label: str, ports: ActorPorts, facts: SessionFacts) -> None:
        self.label, self.ports, self.facts = label, ports, facts
        self.waiting: ThreadRequest | None = None
        self._taken: set[int] = set()

    def request(self, request: ThreadRequest) -> bool:
        """Note a request; True when the lifecycle must see `NewThread`."""
        if request.thread is not None:
            if request.thread in self._taken:
                return False
            self._taken.add(request.thread)
        self.waiting = request
        return True

    def cut(self) -> None:
        """Leave the current thread; the next turn begins the new one."""
        request, self.waiting = self.waiting or EXPLICIT_NEW, None
        carry = None
        if request.carries:
            summary = self.facts.ctx.summary
            carry = Carry(new_id(), summary) if summary else None
        previous = self.facts.leave_thread()
        self.ports.new_thread(self.label, previous, request.thread, request.reason, carry)
        if carry is not None:
            self.facts.carried(carry.turn_id, carry.summary)
