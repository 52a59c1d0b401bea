"""`brokerctl resume`: a person's sessions and threads, to pick one to resume (the
`person.sessions` op, role read)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from brokerctl.app import app, call, console, print_table


@app.command()
def resume(
    entity: Annotated[str, typer.Argument(help="An entity of the person (see `contact`).")],
    limit: Annotated[int, typer.Option(help="Sessions at most, newest first.")] = 50,
) -> None:
    """The sessions of the person ENTITY belongs to (their DMs and forks, merged
    entities included), newest activity first, each with its threads: what to pass to
    `show`, `/switch` or `route.bind` to take one up again."""

    def render(d: dict[str, Any]) -> None:
        console.print(f"{d['name'] or d['canonical']} ({d['canonical']})")
        rows = []
        for s in d["sessions"]:
            threads = ", ".join(
                f"#{t['thread']} {t['turns'] if t['turns'] is not None else '?'} turns"
                for t in s["threads"]
            )
            state = "closed" if s["ended_at"] is not None else s["status"]
            rows.append(
                [s["label"], s["title"] or "", state, str(s["turns"]), s["model"] or "", threads]
            )
        print_table("sessions", ["session", "title", "status", "turns", "model", "threads"], rows)

    call("person.sessions", render, entity=entity, limit=limit)
