"""The pure core: the broker's decisions as functions and value types, with no I/O.

Nothing here reads a clock, a socket, a file or randomness, and nothing imports the
rest of the project: time and random bits come in as parameters, and every other
package imports the core, never the other way round (tests/unit/test_layers.py)."""

__all__ = [
    "backlog",
    "bindings",
    "compaction",
    "engine_types",
    "identity",
    "ids",
    "lifecycle",
    "packing",
    "queue_machine",
    "recall_hint",
    "records",
    "rescan",
    "resets",
    "scratchpad",
    "session_state",
    "snapshots",
    "timers",
    "titles",
    "turn_events",
]
