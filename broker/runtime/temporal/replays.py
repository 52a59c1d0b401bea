"""What rebuilding a session's workflow from its history cost this node, for its
metrics (`[runtime] metrics_address`): a run that is not in the node's cache (another
node died, this one restarted, the cache evicted it) is replayed event by event
before its new task runs, and a takeover's cost grows with the history's length.

Recorded once a replay has caught up, from the run's first activation to the first
that is not a replay: the number of history events replayed and the host's wall time
it took. The figures are only recorded, never decided on: the host's clock read here
changes no command of the workflow, so its determinism is untouched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from temporalio import workflow

EVENTS = "session_replay_events"
SECONDS = "session_replay_seconds"


@dataclass
class ReplayNote:
    started: float | None = field(default_factory=lambda: _began_replaying())

    def caught_up(self) -> None:
        """Call at every wake of the run; records the replay once it ends."""
        if self.started is None or workflow.unsafe.is_replaying():
            return
        seconds, self.started = time.perf_counter() - self.started, None
        meter = workflow.metric_meter()
        events = workflow.info().get_current_history_length()
        meter.create_histogram(EVENTS, "history events a takeover replayed").record(events)
        meter.create_histogram_float(SECONDS, "wall time of a replay", "s").record(seconds)


def _began_replaying() -> float | None:
    return time.perf_counter() if workflow.unsafe.is_replaying() else None
