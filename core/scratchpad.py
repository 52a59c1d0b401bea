"""The scratchpad as the agent sees it in its context. Pure.

An empty scratchpad is not shown at all. A non-empty one has two renderings, best
first: the whole pad as compact JSON, then a short pointer naming its keys, for when
the whole does not fit (`core.packing` takes the first that fits). The pointer lists
at most `POINTER_KEYS` keys, so it stays short however large the pad grows.
"""

from __future__ import annotations

from typing import Any

import orjson

POINTER_KEYS = 5
KEY_CHARS = 40  # of each key named in the pointer


def renderings(pad: Any) -> tuple[str, ...]:
    """`()` for an empty pad, else (whole, pointer)."""
    if not isinstance(pad, dict) or not pad:
        return ()
    whole = orjson.dumps(pad, option=orjson.OPT_SORT_KEYS).decode()
    keys = sorted(pad)
    named = ", ".join(k[:KEY_CHARS] for k in keys[:POINTER_KEYS])
    more = f" and {len(keys) - POINTER_KEYS} more" if len(keys) > POINTER_KEYS else ""
    return (
        "Your scratchpad (your own notes; change them with scratchpad_merge):\n" + whole,
        f"Your scratchpad has {len(keys)} entries ({named}{more}): read them with scratchpad_get.",
    )
