"""`brokerctl name`, `brokerctl alias` and `brokerctl entity`: name a person, lead a
session key to a session, and say who an entity is (`entity.name`, `entity.alias`,
`entity.show`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from brokerctl.app import app, call, console, print_table


@app.command()
def name(
    entity: Annotated[str, typer.Argument(help="An entity of the person (see `contact`).")],
    person: Annotated[str, typer.Argument(metavar="NAME", help="What to call them.")],
    kind: Annotated[
        str | None, typer.Option(help="person, contact or org; the current kind if not given.")
    ] = None,
) -> None:
    """Name the person ENTITY belongs to: the name goes on the canonical entity of its
    merged set, which `sessions` and `show` name."""

    def render(d: dict[str, Any]) -> None:
        console.print(f"{d['entity']} is {d['name']} ({d['kind']})")

    call("entity.name", render, entity=entity, name=person, kind=kind)


@app.command()
def alias(
    key: Annotated[str, typer.Argument(metavar="ALIAS", help="The session key to lead there.")],
    session: Annotated[str, typer.Argument(help="A session label or alias.")],
) -> None:
    """Lead the session key ALIAS to SESSION (an alias of reason `manual`); a key that
    is a session's label, or an alias leading elsewhere, is refused."""

    def render(d: dict[str, Any]) -> None:
        console.print(f"{d['alias']} -> {d['session']}")

    call("entity.alias", render, alias=key, session=session)


@app.command()
def entity(
    entity: Annotated[str, typer.Argument(help="An entity id (see `contact`).")],
) -> None:
    """Who ENTITY is: the canonical entity of its set, its name and kind, the entities
    merged with it and where their direct messages go."""

    def render(d: dict[str, Any]) -> None:
        print_table(
            "entity",
            ["key", "value"],
            [
                ["entity", d["entity"]],
                ["canonical", d["canonical"]],
                ["name", d["name"]],
                ["kind", d["kind"]],
                ["members", ", ".join(d["members"])],
                ["session", d["session"]],
            ],
        )

    call("entity.show", render, entity=entity)
