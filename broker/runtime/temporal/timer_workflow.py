"""A timer as a Temporal workflow: its id is `timer:<timer id>`.

Deterministic and free of I/O, like the session workflow: it sleeps and asks an
activity (timers.py) to fire.

The wait is Temporal's durable timer: the due time lives in Temporal's history, not in
a node, so it fires while any node runs, and a node's death or a clock stepped on one
node changes nothing. The firing is the ledger's (ledger/timers.py), in the activity:
it fires the timer only when it is live and due by the ledger's clock and answers when
it is next due; a cancelled or finished timer answers None and the run ends, and an
activity retried after its commit fires nothing twice (the firing's name is its
primary key). A node's clock behind the workflow's makes the activity answer "not
yet", and the run sleeps at least `MIN_WAIT_MS` before asking again, never a busy
loop. A run continues as new after `FIRINGS_PER_RUN` firings, so its history stays
short.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

FIRE_TIMER = "fire_timer"
TIMER_WORKFLOW = "BrokerTimer"
FIRINGS_PER_RUN = 500
MIN_WAIT_MS = 200
# A firing's write retried by Temporal: quickly at first, then every 10 s, forever
# (a ledger that is down must not lose a due time; it fires once it is back).
FIRE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10)
)


def workflow_id(timer: str) -> str:
    return f"timer:{timer}"


@dataclass
class TimerRun:
    timer: str
    next_at: int  # ms since the epoch: when the timer is due
    fire_timeout_s: float  # one firing activity's bound (a ledger write)


@dataclass
class Fired:
    """The activity's answer: how many items it queued, and the next due time
    (None: the timer will never fire again)."""

    items: int
    next_at: int | None


@workflow.defn(name=TIMER_WORKFLOW)
class TimerWorkflow:
    @workflow.run
    async def run(self, spec: TimerRun) -> None:
        next_at = spec.next_at
        idle = False  # the last answer was "not yet"
        for _ in range(FIRINGS_PER_RUN):
            wait_ms = next_at - int(workflow.now().timestamp() * 1000)
            if idle:
                wait_ms = max(wait_ms, MIN_WAIT_MS)
            if wait_ms > 0:
                await workflow.sleep(timedelta(milliseconds=wait_ms))
            fired = await workflow.execute_activity(
                FIRE_TIMER,
                spec.timer,
                result_type=Fired,
                start_to_close_timeout=timedelta(seconds=spec.fire_timeout_s),
                retry_policy=FIRE_RETRY,
            )
            if fired.next_at is None:
                return
            idle = fired.items == 0 and fired.next_at == next_at
            next_at = fired.next_at
        workflow.continue_as_new(TimerRun(spec.timer, next_at, spec.fire_timeout_s))
