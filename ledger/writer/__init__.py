"""The ledger's one writer: jobs, group commit on one connection (in a process or a
thread of its own), admission to its bounded queue, storage failures and the WAL
checkpointer beside it."""

__all__ = [
    "admission",
    "checkpoint",
    "failures",
    "group_commit",
    "jobs",
    "process",
    "transactor",
]
