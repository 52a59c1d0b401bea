"""`brokerctl files`, `file` and `gc`: file snapshots (the `file.*` and `snapshots.gc` ops)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import anyio
import orjson
import typer

from brokerctl.app import app, call, console, current_socket, opts, print_table
from core.snapshots import content_of, unified_diff
from wire.client import BrokerClient, BrokerError


@app.command()
def files(session: Annotated[str, typer.Argument(help="A session label or alias.")]) -> None:
    """The files the session's thread touched: each with its latest change and size."""

    def render(rows: list[dict[str, Any]]) -> None:
        print_table(
            "files",
            ["path", "op", "bytes", "turn", "sha256"],
            [[r["path"], r["op"], r["bytes"], r["turn"], (r["sha256"] or "")[:12]] for r in rows],
        )

    call("file.list", render, session=session)


@app.command("file")
def file_(
    session: Annotated[str, typer.Argument(help="A session label or alias.")],
    path: Annotated[str, typer.Argument(help="The file's path, as the engine named it.")],
    turn: Annotated[
        str | None, typer.Option(help="The file after this turn (default: the head).")
    ] = None,
    diff: Annotated[
        str | None,
        typer.Option(
            metavar="T2", help="Print a unified diff from the file after T2 to the one shown."
        ),
    ] = None,
) -> None:
    """A file as it was after a turn, or what changed in it since turn T2."""

    async def at(client: BrokerClient, when: str | None) -> dict[str, Any] | None:
        try:
            answer: dict[str, Any] = await client.op(
                "file.at", **{"session": session, "path": path, **({"turn": when} if when else {})}
            )
        except BrokerError as exc:
            if diff is None or exc.code != "not_found" or exc.field != "path":
                raise
            return None  # for a diff, a file that did not exist then is empty
        return answer

    async def go() -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        async with await BrokerClient.connect(current_socket()) as client:
            shown = await at(client, turn)
            return shown, (await at(client, diff) if diff is not None else None)

    try:
        shown, before = anyio.run(go)
    except BrokerError as exc:
        print(f"brokerctl: {exc.code}: {exc.frame.get('message')}", file=sys.stderr)
        raise typer.Exit(1) from exc
    except OSError as exc:
        print(f"brokerctl: cannot reach the broker at {current_socket()}: {exc}", file=sys.stderr)
        raise typer.Exit(2) from exc
    if opts["json"]:
        data = shown if diff is None else {"at": shown, "since": before}
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    if diff is None:
        assert shown is not None
        _write_content(shown)
        return
    if shown is None and before is None:
        print(f"brokerctl: not_found: {path} existed at neither turn", file=sys.stderr)
        raise typer.Exit(1)
    for side in (before, shown):
        if side is not None and not side["stored"]:
            print(f"brokerctl: cannot diff: {side['note']}", file=sys.stderr)
            raise typer.Exit(1)
    old = content_of(before) if before is not None else None
    new = content_of(shown) if shown is not None else None
    sys.stdout.write(unified_diff(path, old, new, diff, turn or "head"))


def _write_content(answer: dict[str, Any]) -> None:
    content = content_of(answer)
    if content is None:
        print(
            f"brokerctl: {answer['path']} after turn {answer['turn']}: sha256 "
            f"{answer['sha256']}, {answer['bytes']} bytes; {answer['note']}",
            file=sys.stderr,
        )
        raise typer.Exit(1)
    sys.stdout.buffer.write(content)
    sys.stdout.flush()


@app.command()
def gc() -> None:
    """Remove stored file contents no turn names any more; never one a turn still names."""
    call(
        "snapshots.gc",
        lambda d: console.print(f"removed {d['blobs']} blob(s), {d['bytes']} bytes"),
    )
