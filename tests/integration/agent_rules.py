"""What the fake agents of the framework engine tests share (tests/integration/frameworks.py
copies this file beside them into the daemon's folder): the slow answer that runs once,
and the tool that holds a turn until the test releases it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

SLOW_MARK = Path("slow-ran-once")
HOLDING, RELEASE = Path("holding"), Path("release")


def first_slow() -> bool:
    """Is this the first slow answer in this folder? (Marks it.)"""
    if SLOW_MARK.exists():
        return False
    SLOW_MARK.write_text("ran")
    return True


def released() -> bool:
    return RELEASE.exists()


async def wait_for_release() -> str:
    """Write `holding`, then wait (20 s at most) for the test's `release`."""
    HOLDING.write_text("holding")  # noqa: ASYNC240 (a few bytes, once)
    for _ in range(1000):
        if released():
            return "held"
        await asyncio.sleep(0.02)
    return "never released"
