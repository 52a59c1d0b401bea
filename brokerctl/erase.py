"""`brokerctl erase`: forget a person (the `entity.erase` op, role admin)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from brokerctl.app import app, call, console


@app.command()
def erase(
    entity: Annotated[str, typer.Argument(help="The entity to forget (see `contact`).")],
    yes: Annotated[
        bool, typer.Option("--yes", help="Do not ask for the id again (scripts).")
    ] = False,
) -> None:
    """Forget ENTITY and every entity merged with it: their sessions, forks, workers,
    contacts and files go, their words in groups become \\[erased]. Asks for the id again
    unless --yes; it cannot be undone (backups made before keep what they held)."""
    confirm = entity
    if not yes:
        if not sys.stdin.isatty():
            print(
                "brokerctl: erase asks for the id again on a terminal; give --yes", file=sys.stderr
            )
            raise typer.Exit(64)
        confirm = typer.prompt(f"This forgets {entity} for good. Type the id again")

    def render(d: dict[str, Any]) -> None:
        console.print(
            f"erased {d['entity']}: {d['sessions']} session(s), {d['messages']} message(s),"
            f" {d['files']} file snapshot(s)"
        )

    call("entity.erase", render, entity=entity, confirm=confirm)
