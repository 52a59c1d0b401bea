"""The event loop's clock as a plain function, its loop looked up once.

`anyio.current_time()` finds the running backend on every call, and a turn reads
the clock many times, so its hot paths take `loop_clock()` once instead
(docs/performance.md, "Figures behind the code's choices"). It is the same clock:
on asyncio the loop's `time()`, which anyio's asyncio backend reads; elsewhere
(trio, and a test's MockClock on it) `anyio.current_time` itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import anyio


def loop_clock() -> Callable[[], float]:
    """`anyio.current_time`, bound to the running asyncio loop if there is one."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:  # trio, or no loop yet
        return anyio.current_time
