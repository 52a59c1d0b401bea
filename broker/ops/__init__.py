"""Operator ops: what an operator connection may ask of the daemon, one small async
function per op, looked up by name in the table (`table.Ops`)."""

__all__ = [
    "files",
    "routes",
    "state",
    "store",
    "table",
    "threads",
    "timers",
    "workers",
]
