"""`brokerctl state SESSION`: the session-state record of its current thread."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from brokerctl.app import app, call, console, print_table


@app.command()
def state(session: Annotated[str, typer.Argument(help="A session label or alias.")]) -> None:
    """The state record of SESSION's current thread: focus, files, decisions, errors."""

    def render(d: dict[str, Any]) -> None:
        s = d["session"]
        console.print(
            f"{s['id']}  head {s['head'] or '-'}  model {s['model'] or '-'}  {s['turns']} turns,"
            f" {s['tool_calls']} tool calls, {s['prompt_tokens']} prompt /"
            f" {s['completion_tokens']} completion tokens"
        )
        console.print(f"focus: {d['focus'] or '-'}")
        if d["files"]:
            print_table(
                "files",
                ["path", "action", "turn"],
                [[f["path"], f["action"], f["turn"]] for f in d["files"]],
            )
        if d["decisions"]:
            print_table(
                "decisions", ["decision", "turn"], [[x["text"], x["turn"]] for x in d["decisions"]]
            )
        if d["errors"]:
            print_table(
                "errors",
                ["error", "turn", "resolved"],
                [[e["text"], e["turn"], "yes" if e["resolved"] else ""] for e in d["errors"]],
            )

    call("session.state", render, session=session)
