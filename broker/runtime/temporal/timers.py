"""Timers under the Temporal runtime: one timer workflow per live timer
(timer_workflow.py), in place of the node's timer wheel (broker/timers.py).

The ledger says which timers are live; Temporal keeps their sleeps. A node starts the
workflow of every live timer it has not started yet, at start, after each add or
cancel made through it (`changed`), and every `RECONCILE_S` for the timers other nodes
added; a start names the workflow id `timer:<id>` and uses the run that exists, so
nodes that start the same timer together make one workflow. A timer no longer live
has its workflow cancelled by the nodes that know it; one that does not know it leaves
it, as the workflow ends by itself at its due time (the ledger fires only live
timers). The firing activity hands the items it queued to their sessions' workflows
like any committed item (runtime.py); if the node dies between the commit and the
hand-off, the nodes' periodic hand-off of open items takes it.
"""

from __future__ import annotations

import anyio
import anyio.abc
from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from broker.mailbox.registry import Mailboxes
from broker.runtime.temporal.timer_workflow import (
    FIRE_TIMER,
    Fired,
    TimerRun,
    TimerWorkflow,
    workflow_id,
)
from plumbing import logs
from plumbing.ids import now_ms

log = logs.get("broker.runtime.temporal.timers")
RECONCILE_S = 30.0
START_TIMEOUT_S = 5.0  # one start or cancel call to Temporal
RETRY_S = 1.0


class TimerActivities:
    def __init__(self, mailboxes: Mailboxes) -> None:
        self.mailboxes = mailboxes

    @activity.defn(name=FIRE_TIMER)
    async def fire_timer(self, timer: str) -> Fired:
        """Fire in the ledger if live and due (timer_workflow.py); hand the items over."""
        fired = await self.mailboxes.ledger.fire_timer(timer, now_ms())
        for item in fired.items:
            self.mailboxes.post(item)
        if fired.items:
            log.info("timer fired", timer=timer, next_at=fired.next_at)
        return Fired(len(fired.items), fired.next_at)


class TemporalTimers:
    """The node's face of the timers, as the wheel's (`changed`, `stop`, `run`)."""

    def __init__(self, mailboxes: Mailboxes, client: Client, task_queue: str) -> None:
        self.mailboxes = mailboxes
        self.client = client
        self.task_queue = task_queue
        self._started: set[str] = set()
        self._changed = anyio.Event()
        self._scope: anyio.CancelScope | None = None

    def changed(self) -> None:
        self._changed.set()

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with anyio.CancelScope() as scope:
            self._scope = scope
            task_status.started()
            while True:
                # A fresh event before reading: a change made while we read wakes us.
                self._changed = anyio.Event()
                try:
                    await self._reconcile()
                except Exception as exc:  # Temporal or the ledger away: next round
                    log.warning("could not bring the timers' workflows up to date", error=str(exc))
                    await anyio.sleep(RETRY_S)
                    self._changed.set()
                    continue
                with anyio.move_on_after(RECONCILE_S):
                    await self._changed.wait()

    def _fire_timeout_s(self) -> float:
        """One firing's bound: a ledger write, idempotent by the firing's msg_id. A node
        that died firing is noticed as soon as one that died in a turn
        (`heartbeat_timeout_s`), and the retry elsewhere files nothing twice."""
        return self.mailboxes.settings.runtime.heartbeat_timeout_s

    async def _reconcile(self) -> None:
        live = {t.timer: t for t in await self.mailboxes.ledger.list_timers(None)}
        for timer, info in live.items():
            if timer in self._started or info.next_at is None:
                continue
            with anyio.fail_after(START_TIMEOUT_S):
                await self.client.start_workflow(
                    TimerWorkflow.run,
                    TimerRun(timer, info.next_at, self._fire_timeout_s()),
                    id=workflow_id(timer),
                    task_queue=self.task_queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                )
            self._started.add(timer)
        for timer in self._started - live.keys():
            with anyio.move_on_after(START_TIMEOUT_S):
                try:
                    await self.client.get_workflow_handle(workflow_id(timer)).cancel()
                except Exception as exc:  # it ended already: nothing to cancel
                    log.debug("timer workflow not cancelled", timer=timer, error=str(exc))
            self._started.discard(timer)
