"""`brokerctl workers`: the workers a session dispatched (the `workers.list` op)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from brokerctl.app import app, call, print_table


@app.command()
def workers(
    session: Annotated[str, typer.Argument(help="A session label or alias.")],
    turn: Annotated[str | None, typer.Option(help="Only the workers of this turn.")] = None,
) -> None:
    """The workers SESSION dispatched (of one turn with --turn), oldest first."""

    def render(rows: list[dict[str, Any]]) -> None:
        print_table(
            "workers",
            ["session", "status", "parent turn", "tool call", "task"],
            [
                [r["session"], r["status"], r["parent_turn"], r["spawn_tool_call_id"], r["task"]]
                for r in rows
            ],
        )

    call("workers.list", render, session=session, turn=turn)
