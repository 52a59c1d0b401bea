"""`brokerctl send` and `brokerctl recall`: a task handed to a session (the
`agent_send` op) and a search of the archive (the `recall.search` op)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from brokerctl.app import app, call, console, print_table


@app.command()
def send(
    task: Annotated[str, typer.Argument(help="The task, in words, for the session's agent.")],
    session: Annotated[
        str | None,
        typer.Option(help="A session label or alias to send it to; default: a new session."),
    ] = None,
    label_hint: Annotated[
        str | None, typer.Option(help="For a new session: a word for its label.")
    ] = None,
    parent: Annotated[
        str | None, typer.Option(help="The session the result goes back to, if any.")
    ] = None,
) -> None:
    """Hand TASK to a session's agent (an existing one with --session, else a new one)."""
    target: dict[str, Any]
    if session is not None:
        target = {"kind": "session", "session": session}
    else:
        target = {"kind": "new_session"}
        if label_hint is not None:
            target["label_hint"] = label_hint
    call(
        "agent_send",
        lambda d: console.print(f"sent to {d['session']} as item {d['item']}"),
        **{"op": "dispatch", "target": target, "task": task, "parent_session": parent},
    )


@app.command()
def recall(
    query: Annotated[str, typer.Argument(help="Words to find (full-text search).")],
    session: Annotated[
        str | None, typer.Option(help="Search this session only (a label or alias).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="At most this many hits.")] = 20,
    mode: Annotated[
        str, typer.Option(help="words (full text), meaning (needs [recall] model_dir) or both.")
    ] = "words",
) -> None:
    """Search what was said: the archive of one session, or of all."""

    def render(hits: list[dict[str, Any]]) -> None:
        print_table(
            f"recall {query!r}",
            ["session", "turn", "role", "snippet"],
            [[h["session"], h["turn"], h["role"], h["snippet"]] for h in hits],
        )

    by = {} if mode == "words" else {"mode": mode}  # a broker before modes knows words only
    call("recall.search", render, query=query, session=session, limit=limit, **by)
