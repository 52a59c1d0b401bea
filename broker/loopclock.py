"""The running event loop's clock as a plain callable.

Why: about 20 clock reads a turn, each of which `anyio.current_time()` makes
look up the backend again: 3% or more of the daemon's CPU per turn in
bench.realistic (docs/performance.md, "The speed tricks re-measured").

Rule 1: `loop_clock()` returns what `anyio.current_time()` would return, on
        either backend, so its readings mix with anyio's deadlines. (It takes
        a running asyncio loop for the backend, as anyio does without sniffio:
        nothing here runs trio as a guest inside an asyncio loop.)
Rule 2: call it inside the event loop; what it returns is good for as long as
        that loop runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import anyio


def loop_clock() -> Callable[[], float]:
    """The clock of the event loop this is called in (Rule 2)."""
    try:
        return asyncio.get_running_loop().time  # what anyio's asyncio backend reads
    except RuntimeError:
        return anyio.current_time  # trio's clock, which a test may replace with its own
