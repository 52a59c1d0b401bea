"""`brokerctl audit`: the audit trail (the `audit.list` op): who changed what, and what
was refused, oldest first."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from brokerctl.app import app, call, print_table, usage_error

_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def since_ms(value: str, now_s: float) -> int:
    """`value` as ms since the epoch: a duration back from now (30m, 2h, 7d), an ISO
    8601 time (UTC if it names no offset), or ms since the epoch."""
    ago = _AGO.match(value)
    if ago:
        return int((now_s - float(ago.group(1)) * _UNIT_S[ago.group(2)]) * 1000)
    if value.isdigit():
        return int(value)
    when = datetime.fromisoformat(value)  # ValueError for anything else
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


@app.command()
def audit(
    since: Annotated[
        str | None, typer.Option(help="From this time: 30m, 2h, 7d, an ISO 8601 time or ms.")
    ] = None,
    op: Annotated[str | None, typer.Option(help="Only this op (or agent tool).")] = None,
    limit: Annotated[int, typer.Option(help="The latest this many rows.")] = 100,
) -> None:
    """The audit trail: every op that changed something or was refused, and every refused
    agent tool call (uid and role empty), oldest first. Times are UTC."""
    start = None
    if since is not None:
        try:
            start = since_ms(since, time.time())
        except ValueError:
            usage_error("audit --since 30m|2h|7d|2026-01-31T09:00|<ms>")

    def render(rows: list[dict[str, Any]]) -> None:
        print_table(
            "audit",
            ["at (UTC)", "uid", "role", "op", "target", "outcome"],
            [
                [_when(r["at"]), r["uid"], r["role"], r["op"], r["target"], r["outcome"]]
                for r in rows
            ],
        )

    call("audit.list", render, since=start, op=op, limit=limit)
