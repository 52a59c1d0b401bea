"""`brokerctl timers`: list, add and cancel timers (the `timer.*` ops)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from brokerctl.app import app, call, console, print_table, usage_error


@app.command()
def timers(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            help="[SESSION] to list (all sessions without it); 'add SESSION TEXT' with"
            " --in or --at (and --every); 'cancel TIMER'.",
            show_default=False,
        ),
    ] = None,
    in_s: Annotated[float | None, typer.Option("--in", help="add: first due in S seconds.")] = None,
    at: Annotated[str | None, typer.Option(help="add: first due at this RFC 3339 time.")] = None,
    every: Annotated[float | None, typer.Option(help="add: then again every S seconds.")] = None,
) -> None:
    """List, add or cancel timers: `timers [SESSION]`, `timers add SESSION TEXT (--in S |
    --at TIME) [--every S]`, `timers cancel TIMER`."""
    words = list(args or [])
    verb = words[0] if words else None
    if verb == "add":
        if len(words) != 3:
            usage_error("timers add SESSION TEXT (--in S | --at TIME) [--every S]")
        call(
            "timer.add",
            lambda d: console.print(f"timer {d['timer']}: next at {_ms_time(d['next_at'])}"),
            session=words[1],
            text=words[2],
            in_s=in_s,
            at=at,
            every_s=every,
        )
        return
    if in_s is not None or at is not None or every is not None:
        usage_error("--in, --at and --every go with 'timers add'")
    if verb == "cancel":
        if len(words) != 2:
            usage_error("timers cancel TIMER")
        call(
            "timer.cancel",
            lambda d: console.print(f"timer {d['timer']}: {d['status']}"),
            timer=words[1],
        )
        return
    if len(words) > 1:
        usage_error("timers [SESSION]")

    def render(rows: list[dict[str, Any]]) -> None:
        print_table(
            "timers",
            ["timer", "session", "next at", "every s", "fired", "text"],
            [
                [
                    r["timer"],
                    r["session"],
                    _ms_time(r["next_at"]),
                    r["every_s"],
                    r["fired"],
                    r["text"],
                ]
                for r in rows
            ],
        )

    call("timer.list", render, session=verb)


def _ms_time(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
