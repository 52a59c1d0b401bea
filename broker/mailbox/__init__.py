"""A session's mailbox: its actor, which runs the turns, and the registry of live actors.

What a message does to a session and how its turns run are decided by the pure machines
in ``core`` (``queue_machine``, ``lifecycle``); the actor (``actor``) performs
their actions through its ports (``ports``, ``session_ports``), and the registry
(``registry``) starts, supervises and drains the actors.
"""

__all__ = [
    "actor",
    "chat",
    "commands",
    "compactor",
    "ports",
    "registry",
    "restarts",
    "running_turn",
    "session_facts",
    "session_ports",
    "thread_start",
    "turn_commit",
    "turn_parts",
    "turn_steps",
    "warm_threads",
    "write_room",
]
