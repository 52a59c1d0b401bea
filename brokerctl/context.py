"""`brokerctl compact` and `brokerctl scratchpad`: what an agent keeps in its context
(the `session.compact`, `scratchpad.get` and `scratchpad.merge` ops)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import orjson
import typer

from brokerctl.app import app, call, console, usage_error


@app.command()
def compact(
    session: Annotated[str, typer.Argument(help="A session label or alias.")],
    focus: Annotated[
        str | None, typer.Option(help="What the summary must keep (the summarizer's focus).")
    ] = None,
) -> None:
    """Compact SESSION now, between its turns: a compaction turn summarizes its history."""
    call(
        "session.compact",
        lambda d: console.print(f"compaction turn {d['turn']}"),
        session=session,
        instructions=focus,
    )


@app.command()
def scratchpad(
    session: Annotated[str, typer.Argument(help="A session label.")],
    merge: Annotated[
        str | None,
        typer.Option(help="A JSON merge patch (RFC 7396) to apply first; null removes a key."),
    ] = None,
) -> None:
    """Show SESSION's scratchpad, after merging a patch into it with --merge."""

    def render(pad: Any) -> None:
        sys.stdout.write(orjson.dumps(pad, option=orjson.OPT_INDENT_2).decode() + "\n")

    if merge is None:
        call("scratchpad.get", render, session=session)
        return
    try:
        patch = orjson.loads(merge)
    except orjson.JSONDecodeError:
        usage_error("scratchpad SESSION --merge '<a JSON object>'")
    if not isinstance(patch, dict):
        usage_error("scratchpad SESSION --merge '<a JSON object>'")
    call("scratchpad.merge", render, session=session, patch=patch)
