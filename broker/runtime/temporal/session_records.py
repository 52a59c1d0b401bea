"""What a session's workflow and its activities hand each other: the names they
call each other by and the records they pass (Temporal's data converter carries
them as JSON). Kept apart from the workflow so that the activities' side imports
no workflow code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SESSION_QUEUE = "session_queue"
RUN_ITEMS = "run_items"
RUN_COMMANDS = "run_commands"
DROP_ITEMS = "drop_items"
FAIL_ITEMS = "fail_items"
FAILED_DROP = "failed"  # a dropped item's reason when even its failed turn was not recorded
NODE_STOPPING = "NodeStopping"  # the activity's error when its node stops: not a failure
LEASE_LOST = "LeaseLost"  # an attempt cut off by the loss of its session's lease
STALE_ATTEMPT = "StaleAttempt"  # an attempt that reached its node after the server gave it up
ITEM_SIGNAL = "arrive"
CONTROL_QUERY = "control"
PUSH_CONTROL = "push_control"
# the patch that brought local short steps, one idle timer and pushed news.
LEAN = "fewer-round-trips"
# the patch that bounds a run's history (`SessionSpec.history_max_events`).
BOUNDED = "bounded-history"
# the patch that runs a turn again when its attempts ran out on silent nodes.
SILENCES = "silences-retried"


@dataclass
class SessionSpec:
    """What a node knows of the session when it starts the workflow."""

    label: str
    idle_s: float
    steerable: bool  # the engine takes steering (engines/base.py)
    turn_timeout_s: float
    heartbeat_timeout_s: float
    # What a run that continued as new carried over: its waiting items and commands.
    carried: list[Arrival] = field(default_factory=list)
    # workflow.py: a run goes on as a new one past this many history events (0:
    # at Temporal's suggestion only, as a run an older node began).
    history_max_events: int = 0


@dataclass
class QueueSetup:
    """The session's queue limits and `/queue` mode, its override over the config's."""

    debounce_s: float
    cap: int | None
    drop: str
    mode: str | None = None


@dataclass
class Arrival:
    """One committed queue item: its ledger record (`ledger.items.ItemInfo` fields)
    and the mode its route gives it when it names none (router.py)."""

    record: list[Any]
    default_mode: str | None
    command: bool = False  # a chat command: not a turn of its own


@dataclass
class TurnOrder:
    label: str
    turn_no: int
    records: list[list[Any]]
    noted: list[list[Any]] = field(default_factory=list)  # dropped: named in a note


@dataclass
class FailedTurn:
    """The turn whose activity failed every attempt, and why (the failure's
    kind: its error type, or Temporal's timeout)."""

    order: TurnOrder
    kind: str


@dataclass
class TurnResult:
    outcome: str  # completed | failed | aborted
    steer_taken: list[str] = field(default_factory=list)
    commands_taken: list[str] = field(default_factory=list)  # handled by the turn's actor


@dataclass
class Drops:
    label: str
    drops: list[tuple[str, str]]  # (item id, reason)
