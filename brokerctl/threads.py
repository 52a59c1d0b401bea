"""`brokerctl reset`, `threads` and `cancel`: a session's threads and its waiting items
(the `session.reset`, `session.threads` and `item.cancel` ops)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from brokerctl.app import app, call, console, print_table


@app.command()
def reset(
    session: str,
    reason: Annotated[
        str | None, typer.Option(help="Why, for the log (the thread's reason is 'operator').")
    ] = None,
) -> None:
    """Start a new, empty thread of SESSION before its next turn; the old one stays."""
    call(
        "session.reset",
        lambda d: console.print(f"{d['label']}: now in thread {d['thread']}"),
        session=session,
        reason=reason,
    )


@app.command()
def threads(session: str) -> None:
    """List SESSION's threads, oldest first, with the reason each began."""

    def render(rows: list[dict[str, Any]]) -> None:
        print_table(
            f"threads of {session}",
            ["thread", "reason", "started", "ended", "turns", "head"],
            [
                [
                    r["thread"],
                    r["reason"],
                    _ms_time(r["started_at"]),
                    _ms_time(r["ended_at"]),
                    r["turns"],
                    r["head"],
                ]
                for r in rows
            ],
        )

    call("session.threads", render, session=session)


@app.command()
def cancel(session: str, item: str) -> None:
    """Cancel ITEM of SESSION while it waits: it never runs (a running or finished
    item cannot be cancelled)."""
    call(
        "item.cancel",
        lambda d: console.print(f"item {d['item']}: {d['status']}"),
        session=session,
        item=item,
    )


def _ms_time(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")
