"""The Temporal runtime as a test configuration.

`TEST_RUNTIME=temporal pytest ...` runs every daemon the harness starts on the
Temporal runtime, against one dev server for the whole session (conftest.py
starts it); the tests marked `temporal` start it themselves. Daemons on trio stay
on the local runtime (the Temporal SDK is asyncio's). A single node on
its own SQLite ledger, through `runtime.allow_local_ledger` (single-node only).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

ENV = "TEST_RUNTIME"
# A dev server already running (a benchmark's: `TEST_TEMPORAL_ADDRESS=127.0.0.1:port
# python -m bench.turns` runs its daemons on the Temporal runtime).
_address: str | None = os.environ.get("TEST_TEMPORAL_ADDRESS") or None


def wanted() -> bool:
    return os.environ.get(ENV, "local") == "temporal"


def set_address(address: str | None) -> None:
    global _address
    _address = address


def runtime_config(address: str) -> dict[str, Any]:
    """A single node on the Temporal dev server at `address`; a task queue of its own,
    so daemons of other tests never pick up its turns."""
    return {
        "kind": "temporal",
        "address": address,
        "task_queue": f"t-{uuid.uuid4().hex[:12]}",
        "allow_local_ledger": True,
        "heartbeat_timeout_s": 2.0,
    }


def default_runtime() -> dict[str, Any] | None:
    """What the harness adds to every daemon's config when the switch is on."""
    return runtime_config(_address) if _address is not None else None
