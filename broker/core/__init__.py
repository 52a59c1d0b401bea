"""The session core: the broker's decisions as pure functions and value types.

Rule 1: nothing here does I/O or reads a clock or randomness: no asyncio, anyio,
        trio, sqlite3, socket, subprocess, threading, time or os. Time and
        random bits come in as parameters.
Rule 2: nothing here imports the project outside `broker.core`. The ledger and
        the broker shell import the core, never the other way round
        (docs/architecture.md; tests/unit/test_layers.py checks both rules).

Modules: `ids` (ULID encoding), `identity` (union-find roots, session keys, label
resolution), `queue_machine` (queue modes of one session), `packing` and
`compaction` (what goes into a turn's context), `session_state` (the state record
a thread keeps of its turns), `engine_types` (the request, message and result values shared
with engines and the ledger), `records` (the immutable value decorator).
"""
