"""Process plumbing every part of the broker shares: structured logs, ids and the
wall clock, the event loop's clock, the non-blocking socket reader and the
garbage-collector settings.

It sits just above the core and below everything else, so the ledger, the daemon,
the adapters and brokerctl get a logger without importing one another."""

__all__ = [
    "clock",
    "gc_policy",
    "ids",
    "logs",
    "rawsock",
]
