"""Sessions as Temporal workflows (docs/cluster.md, "Sessions on Temporal").

`workflow.py` is the session's mailbox (deterministic: the pure queue machine on the
workflow's clock), `activities.py` runs a turn on the node that picked it up,
`runtime.py` is the node's side (client, worker, hand-off of committed items) and
`devserver.py` starts a local `temporal server start-dev` for tests and demos.
"""

__all__ = [
    "activities",
    "control",
    "devserver",
    "failed_turn",
    "idle_timer",
    "live_turns",
    "payloads",
    "replays",
    "runtime",
    "session_records",
    "timer_workflow",
    "timers",
    "workflow",
]
