"""The ledger port on SQLite: `Ledger` (store.py) opens the file and runs its one
writer and its readers (connections.py); each other module implements one part of
the port (ingest, turns, delivery, reads, ops, timers, snapshots, routes, threads,
titles, library)."""

__all__ = [
    "connections",
    "delivery",
    "ingest",
    "library",
    "ops",
    "reads",
    "routes",
    "snapshots",
    "store",
    "threads",
    "timers",
    "titles",
    "turns",
]
