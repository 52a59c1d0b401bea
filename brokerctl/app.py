"""brokerctl's shared parts: the typer app, the global options, and the one way a
command calls an op and prints its answer (a table, or `--json`).

The global options (`--json`, `-s/--socket`, `-c/--config`) may come before or
after the command's name: `hoist_globals` moves those written after it to the
front, up to a `--`, before typer parses the line.
"""

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
    help="Inspect and steer a running broker.",
    no_args_is_help=True,
)
console = Console()
opts: dict[str, Any] = {"socket": None, "config": None, "json": False}


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"brokerctl {version('agent-broker')}")
        except PackageNotFoundError:
            print("brokerctl (not installed: version unknown)")
        raise typer.Exit()


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
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    opts.update(socket=socket, config=config, json=as_json)


FLAGS = frozenset({"--json"})
WITH_VALUE = frozenset({"-s", "--socket", "-c", "--config"})


def hoist_globals(argv: list[str]) -> list[str]:
    """`argv` (without the program) with the global options written after the
    command's name moved before it, so `brokerctl sessions --json` is
    `brokerctl --json sessions`."""
    front: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        takes_value = argv[i] in WITH_VALUE
        front += argv[i : i + 1 + takes_value]
        i += 1 + takes_value
    if i >= len(argv):
        return argv
    moved: list[str] = []
    rest: list[str] = [argv[i]]
    i += 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest += argv[i:]
            break
        name = arg.split("=", 1)[0]
        if arg in FLAGS or (name in WITH_VALUE and "=" in arg):
            moved.append(arg)
        elif arg in WITH_VALUE and i + 1 < len(argv):
            moved += argv[i : i + 2]
            i += 1
        else:
            rest.append(arg)
        i += 1
    return front + moved + rest


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


def call(op: str, render: Callable[[Any], None], /, **args: Any) -> None:
    async def go() -> Any:
        async with await BrokerClient.connect(current_socket()) as client:
            return await client.op(op, **{k: v for k, v in args.items() if v is not None})

    try:
        data = anyio.run(go)
    except BrokerError as exc:
        print(f"brokerctl: {exc.code}: {exc.frame.get('message')}", file=sys.stderr)
        if exc.code == "forbidden":  # the message names the role this uid has
            print(
                "brokerctl: an admin may give this uid another role in the broker's"
                " [operators] configuration",
                file=sys.stderr,
            )
            raise typer.Exit(77) from exc  # EX_NOPERM
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
