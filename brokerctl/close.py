"""`brokerctl close`: end a session (the `session.close` op, role operate)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from brokerctl.app import app, call, console


@app.command()
def close(
    session: Annotated[str, typer.Argument(help="The session to close (a label or an alias).")],
    summary: Annotated[
        str | None,
        typer.Option(help="The closing summary; without it, one made of the turns' titles."),
    ] = None,
) -> None:
    """Close SESSION: it takes no more turns, and the next message for it opens a new
    session that extends it. Refused while it has queued or running items or live
    timers."""

    def render(d: dict[str, Any]) -> None:
        console.print(f"closed {d['session']} ({d['source']} summary): {d['closing_summary']}")

    call("session.close", render, session=session, summary=summary)
