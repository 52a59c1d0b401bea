"""The ledger port on SQLite: `Ledger` (store.py) with one writer and a few readers,
and the parts of it that serve each of the port's Protocols."""

__all__ = [
    "admission",
    "events",
    "library",
    "outbox",
    "reads",
    "routes",
    "store",
    "threads",
    "timers",
]
