"""brokerctl's shared parts: the typer app, the global options, and the one way a
command calls an op and prints its answer (a table, or `--json`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import anyio
import orjson
import typer
from rich.console import Console
from rich.table import Table

from wire.client import BrokerClient, BrokerError

app = typer.Typer(
    pretty_exceptions_enable=False,
    add_completion=False,
    help="Inspect and steer a running broker.",
    no_args_is_help=True,
)
console = Console()
opts: dict[str, Any] = {"socket": None, "config": None, "json": False}


@app.callback()
def _main(
    socket: Annotated[
        Path | None,
        typer.Option("--socket", "-s", envvar="BROKER_SOCKET", help="The broker's socket."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Read the socket path from this config.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print raw JSON data.")] = False,
) -> None:
    opts.update(socket=socket, config=config, json=as_json)


def socket_path(socket: Path | None, config: Path | None) -> Path:
    """The broker's socket: `socket` if given, else the one `config` names."""
    if socket is not None:
        return socket
    from broker.config import (  # only here: brokerctl's start (brokerctl/main.py)
        ConfigError,
        load_settings,
    )

    try:
        return load_settings(config).socket_path
    except ConfigError as exc:
        print(f"brokerctl: {exc}", file=sys.stderr)
        raise typer.Exit(78) from exc


def current_socket() -> Path:
    return socket_path(opts["socket"], opts["config"])


def call(op: str, render: Callable[[Any], None], **args: Any) -> None:
    async def go() -> Any:
        async with await BrokerClient.connect(current_socket()) as client:
            return await client.op(op, **{k: v for k, v in args.items() if v is not None})

    try:
        data = anyio.run(go)
    except BrokerError as exc:
        print(f"brokerctl: {exc.code}: {exc.frame.get('message')}", file=sys.stderr)
        raise typer.Exit(1) from exc
    except OSError as exc:
        print(
            f"brokerctl: cannot reach the broker at {current_socket()}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        raise typer.Exit(2) from exc
    if opts["json"]:
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        render(data)


def print_table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*["" if v is None else str(v) for v in row])
    console.print(table)


def usage_error(line: str) -> NoReturn:
    print(f"brokerctl: usage: brokerctl {line}", file=sys.stderr)
    raise typer.Exit(64)
