"""`brokerctl merges`: the merge proposals agents made (`propose_merge`), listed and
decided (`merge.list`, `merge.accept`, `merge.reject`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from brokerctl.app import app, call, console, print_table, usage_error


@app.command()
def merges(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            help="Nothing to list the pending ones; 'all' to list every one;"
            " 'accept N' or 'reject N' to decide proposal N.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """List or decide merge proposals: `merges [all]`, `merges accept N`, `merges reject
    N`. Accepting merges the contact into the person, as `merge FROM INTO` does."""
    words = list(args or [])
    if words and words[0] in ("accept", "reject"):
        if len(words) != 2 or not words[1].isdigit():
            usage_error(f"merges {words[0]} N")

        def decided(d: dict[str, Any]) -> None:
            p = d["proposal"]
            line = f"proposal {p['proposal']}: {p['status']}"
            if d.get("canonical"):
                line += f"; {p['contact']} is now {d['canonical']}"
            console.print(line)

        call(f"merge.{words[0]}", decided, proposal=int(words[1]))
        return
    if words not in ([], ["all"]):
        usage_error("merges [all] | merges accept N | merges reject N")

    def render(rows: list[dict[str, Any]]) -> None:
        print_table(
            "merge proposals",
            ["N", "contact", "person", "status", "session", "proposed", "reason"],
            [
                [
                    str(r["proposal"]),
                    r["contact"],
                    r["person"],
                    r["status"],
                    r["session"] or "",
                    datetime.fromtimestamp(r["created_at"] / 1000, UTC).strftime("%Y-%m-%d %H:%M"),
                    r["reason"],
                ]
                for r in rows
            ],
        )

    call("merge.list", render, status=None if words else "pending")
