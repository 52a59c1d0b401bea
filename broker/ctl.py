"""`brokerctl`: the operator's command line.

Each command is one op of the wire protocol; `--json` prints the raw data,
otherwise a readable table.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import anyio
import orjson
import typer
from rich.console import Console
from rich.table import Table

from adapters.terminal import ChatConfig, chat_in_terminal
from broker.core.queue_machine import QueueMode
from broker.core.snapshots import content_of, unified_diff
from ledger.errors import LedgerLookupError
from ledger.ids import now_ms
from ledger.jobs import LedgerWriteFailed
from ledger.sessions import ImportError_
from ledger.transfer import backup as backup_ledger
from ledger.transfer import export_session, import_session

from .client import BrokerClient, BrokerError
from .config import ConfigError, LedgerSettings, load_settings

app = typer.Typer(
    pretty_exceptions_enable=False,
    add_completion=False,
    help="Inspect and steer a running broker.",
    no_args_is_help=True,
)
console = Console()
_opts: dict[str, Any] = {"socket": None, "config": None, "json": False}


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
    _opts.update(socket=socket, config=config, json=as_json)


def socket_path(socket: Path | None, config: Path | None) -> Path:
    """The broker's socket: `socket` if given, else the one `config` names."""
    if socket is not None:
        return socket
    try:
        return load_settings(config).socket_path
    except ConfigError as exc:
        print(f"brokerctl: {exc}", file=sys.stderr)
        raise typer.Exit(78) from exc


def _socket() -> Path:
    return socket_path(_opts["socket"], _opts["config"])


def call(op: str, render: Callable[[Any], None], **args: Any) -> None:
    async def go() -> Any:
        async with await BrokerClient.connect(_socket()) as client:
            return await client.op(op, **{k: v for k, v in args.items() if v is not None})

    try:
        data = anyio.run(go)
    except BrokerError as exc:
        print(f"brokerctl: {exc.code}: {exc.frame.get('message')}", file=sys.stderr)
        raise typer.Exit(1) from exc
    except OSError as exc:
        print(
            f"brokerctl: cannot reach the broker at {_socket()}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        raise typer.Exit(2) from exc
    if _opts["json"]:
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        render(data)


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*["" if v is None else str(v) for v in row])
    console.print(table)


@app.command()
def health() -> None:
    """Is the broker up, and how busy is it."""

    def render(d: dict[str, Any]) -> None:
        _table("health", ["key", "value"], [[k, v] for k, v in d.items()])

    call("health", render)


@app.command()
def sessions(
    status: Annotated[str | None, typer.Option(help="Only sessions with this status.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 100,
) -> None:
    """List sessions, most recently active first."""

    def render(rows: list[dict[str, Any]]) -> None:
        _table(
            "sessions",
            ["label", "status", "state", "turns", "queued", "parent"],
            [
                [r["label"], r["status"], r["state"], r["turns"], r["queued"], r["parent"]]
                for r in rows
            ],
        )

    call("sessions.list", render, status=status, limit=limit)


@app.command()
def show(
    session: Annotated[str, typer.Argument(help="A session label or alias.")],
    limit: Annotated[int, typer.Option(help="At most this many turns and items.")] = 50,
) -> None:
    """One session: its aliases, backlog and thread."""

    def render(d: dict[str, Any]) -> None:
        console.print(
            f"[bold]{d['label']}[/bold]  status={d['status']} state={d['state']} "
            f"head={d['head']} aliases={', '.join(d['aliases']) or '-'}"
        )
        if d.get("merged_into"):
            console.print(f"merged into {d['merged_into']}")
        _table(
            "queue",
            ["item", "status", "mode", "msg_id", "reason", "text"],
            [
                [q["item"], q["status"], q["mode"], q["msg_id"], q["reason"], q["preview"]]
                for q in d["queued"]
            ],
        )
        _table(
            "turns",
            ["id", "type", "status", "inputs", "output"],
            [
                [t["id"], t["type"], t["status"], ",".join(t["inputs"]), (t["output"] or "")[:60]]
                for t in d["turns"]
            ],
        )

    call("session.show", render, session=session, limit=limit)


@app.command()
def contact(channel: str, sender_id: str) -> None:
    """Who a channel's sender is: entity, canonical entity, session."""

    def render(d: dict[str, Any]) -> None:
        _table(
            "contact",
            ["entity", "canonical", "session"],
            [[d["entity"], d["canonical"], d["session"]]],
        )

    call("contact.show", render, channel=channel, sender_id=sender_id)


@app.command()
def merge(
    src: Annotated[str, typer.Argument(metavar="FROM", help="Entity id to merge.")],
    into: Annotated[str, typer.Argument(metavar="INTO", help="Entity id to merge into.")],
) -> None:
    """Merge two entities; their DM sessions converge on one primary session."""

    def render(d: dict[str, Any]) -> None:
        console.print(f"canonical entity: {d['canonical']}   primary session: {d['primary']}")
        _table("aliases", ["alias", "session"], [[a["alias"], a["session"]] for a in d["aliases"]])

    call("entity.merge", render, **{"from": src, "into": into})


@app.command()
def logs(
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream live records.")] = False,
    session: Annotated[str | None, typer.Option(help="Only records of this session.")] = None,
    level: Annotated[str, typer.Option(help="Minimum level: debug, info, warning, error.")] = (
        "info"
    ),
) -> None:
    """Follow the broker's log (past records are in the journal: journalctl -u brokerd)."""
    if not follow:
        print(
            "brokerctl: only --follow is served; past records are in the journal "
            "(journalctl -u brokerd)",
            file=sys.stderr,
        )
        raise typer.Exit(2)

    async def go() -> None:
        async with await BrokerClient.connect(_socket()) as client:
            args = {"level": level, **({"session": session} if session else {})}
            await client.op("logs.follow", **args)
            while True:
                frame = await client.recv()
                if frame.get("type") == "log":
                    _print_log(frame)

    try:
        anyio.run(go)
    except KeyboardInterrupt:
        return
    except BrokerError as exc:
        print(f"brokerctl: {exc.code}: {exc.frame.get('message')}", file=sys.stderr)
        raise typer.Exit(1) from exc
    except (OSError, anyio.EndOfStream) as exc:
        print(f"brokerctl: the broker at {_socket()} went away", file=sys.stderr)
        raise typer.Exit(2) from exc


def _print_log(frame: dict[str, Any]) -> None:
    if _opts["json"]:
        frame.pop("type", None)
        sys.stdout.write(orjson.dumps(frame).decode() + "\n")
    else:
        ts, lvl, event = frame.pop("timestamp", ""), frame.pop("level", ""), frame.pop("event", "")
        frame.pop("type", None)
        rest = " ".join(f"{k}={v}" for k, v in frame.items())
        console.print(f"[dim]{ts}[/dim] {lvl:<7} [bold]{event}[/bold] {rest}", highlight=False)
    sys.stdout.flush()


@app.command("chat")
def chat(
    socket: Annotated[
        Path | None,
        typer.Option("--socket", "-s", envvar="BROKER_SOCKET", help="The broker's socket."),
    ] = None,
    channel: Annotated[str, typer.Option(help="The channel to speak as.")] = "terminal",
    sender: Annotated[str, typer.Option(help="Your sender id on that channel.")] = "me",
    name: Annotated[str | None, typer.Option(help="Your display name.")] = None,
    mode: Annotated[
        QueueMode | None, typer.Option(help="Queue mode for your messages (default: the broker's).")
    ] = None,
    token: Annotated[
        str | None, typer.Option(envvar="BROKER_CHANNEL_TOKEN", help="The channel's token.")
    ] = None,
    status: Annotated[
        bool, typer.Option("--status/--no-status", help="Show the queue state after each reply.")
    ] = True,
    wait: Annotated[
        float, typer.Option(help="At end of input, wait this long for the replies.")
    ] = 60.0,
) -> None:
    """Chat with the broker from the terminal (lines from stdin; /status, /stop work)."""
    cfg = ChatConfig(socket or _socket(), channel, sender, name, mode, token, status, wait)
    raise typer.Exit(chat_in_terminal(cfg))


@app.command()
def fork(
    turn: Annotated[str, typer.Argument(help="The turn to branch from.")],
    label: Annotated[str | None, typer.Option(help="The new session's label.")] = None,
) -> None:
    """A new session whose head is TURN; both go on independently."""
    call("session.fork", lambda d: console.print(f"forked: {d['label']}"), turn=turn, label=label)


@app.command("export")
def export_(
    session: Annotated[str, typer.Argument(help="A session label.")],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="File (default stdout).")
    ] = None,
) -> None:
    """Write a session's thread as JSON lines: a header, then its turns with messages."""
    ledger = _ledger_settings()
    out = output.open("wb") if output else sys.stdout.buffer
    try:
        export_session(ledger.path, ledger.synchronous, session, now_ms(), out.write)
    except LedgerLookupError as exc:
        print(f"brokerctl: {exc}", file=sys.stderr)
        raise typer.Exit(1) from exc
    finally:
        if output:
            out.close()


@app.command("import")
def import_(
    source: Annotated[Path, typer.Argument(help="A file written by `brokerctl export`.")],
    label: Annotated[str | None, typer.Option(help="The new session's label.")] = None,
) -> None:
    """Read an exported thread back into a new session (new turn ids)."""
    ledger = _ledger_settings()
    try:
        lines = source.read_bytes().splitlines()
        made, turns = import_session(ledger.path, ledger.synchronous, lines, label, now_ms())
    except (ImportError_, LedgerLookupError, LedgerWriteFailed, OSError) as exc:
        print(f"brokerctl: import failed, nothing was written: {exc}", file=sys.stderr)
        raise typer.Exit(1) from exc
    console.print(f"imported {turns} turn(s) as {made}")


def _ledger_settings() -> LedgerSettings:
    try:
        settings = load_settings(_opts["config"])
    except ConfigError as exc:
        print(f"brokerctl: {exc}", file=sys.stderr)
        raise typer.Exit(78) from exc
    if not settings.ledger.path.exists():
        print(f"brokerctl: no ledger at {settings.ledger.path}", file=sys.stderr)
        raise typer.Exit(1)
    return settings.ledger


@app.command()
def backup(
    target: Annotated[Path, typer.Argument(help="Where to write the copy (must not exist).")],
) -> None:
    """Copy the ledger consistently while the daemon runs (SQLite online backup)."""
    try:
        ledger = load_settings(_opts["config"]).ledger.path
    except ConfigError as exc:
        print(f"brokerctl: {exc}", file=sys.stderr)
        raise typer.Exit(78) from exc
    if target.exists():
        print(f"brokerctl: {target} exists; choose a new file", file=sys.stderr)
        raise typer.Exit(1)
    problems = backup_ledger(ledger, target)
    if problems:
        print(f"brokerctl: the copy fails its integrity check: {problems[:3]}", file=sys.stderr)
        raise typer.Exit(1)
    console.print(f"backed up {ledger} to {target} ({target.stat().st_size} bytes)")


@app.command()
def doctor() -> None:
    """Check the config, socket, daemon, ledger and stuck sessions; say what to fix."""
    from .doctor import run_checks

    findings = anyio.run(run_checks, _opts["config"])
    if _opts["json"]:
        rows = [
            {"level": f.level, "check": f.check, "message": f.message, "fix": f.fix}
            for f in findings
        ]
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        colour = {"ok": "green", "warn": "yellow", "fail": "red"}
        for f in findings:
            console.print(f"[{colour[f.level]}]{f.level:>4}[/] {f.check:<11} {f.message}")
            if f.fix and f.level != "ok":
                console.print(f"{'':17}→ {f.fix}")
    if any(f.level == "fail" for f in findings):
        raise typer.Exit(1)


@app.command()
def timers(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            help="[SESSION] to list (all sessions without it); 'add SESSION TEXT' with"
            " --in or --at (and --every); 'cancel TIMER'.",
            show_default=False,
        ),
    ] = None,
    in_s: Annotated[float | None, typer.Option("--in", help="add: first due in S seconds.")] = None,
    at: Annotated[str | None, typer.Option(help="add: first due at this RFC 3339 time.")] = None,
    every: Annotated[float | None, typer.Option(help="add: then again every S seconds.")] = None,
) -> None:
    """List, add or cancel timers: `timers [SESSION]`, `timers add SESSION TEXT (--in S |
    --at TIME) [--every S]`, `timers cancel TIMER`."""
    words = list(args or [])
    verb = words[0] if words else None
    if verb == "add":
        if len(words) != 3:
            _usage("timers add SESSION TEXT (--in S | --at TIME) [--every S]")
        call(
            "timer.add",
            lambda d: console.print(f"timer {d['timer']}: next at {_ms_time(d['next_at'])}"),
            session=words[1],
            text=words[2],
            in_s=in_s,
            at=at,
            every_s=every,
        )
        return
    if in_s is not None or at is not None or every is not None:
        _usage("--in, --at and --every go with 'timers add'")
    if verb == "cancel":
        if len(words) != 2:
            _usage("timers cancel TIMER")
        call(
            "timer.cancel",
            lambda d: console.print(f"timer {d['timer']}: {d['status']}"),
            timer=words[1],
        )
        return
    if len(words) > 1:
        _usage("timers [SESSION]")

    def render(rows: list[dict[str, Any]]) -> None:
        _table(
            "timers",
            ["timer", "session", "next at", "every s", "fired", "text"],
            [
                [
                    r["timer"],
                    r["session"],
                    _ms_time(r["next_at"]),
                    r["every_s"],
                    r["fired"],
                    r["text"],
                ]
                for r in rows
            ],
        )

    call("timer.list", render, session=verb)


def _usage(line: str) -> NoReturn:
    print(f"brokerctl: usage: brokerctl {line}", file=sys.stderr)
    raise typer.Exit(64)


def _ms_time(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


@app.command()
def files(session: Annotated[str, typer.Argument(help="A session label or alias.")]) -> None:
    """The files the session's thread touched: each with its latest change and size."""

    def render(rows: list[dict[str, Any]]) -> None:
        _table(
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
        async with await BrokerClient.connect(_socket()) as client:
            shown = await at(client, turn)
            return shown, (await at(client, diff) if diff is not None else None)

    try:
        shown, before = anyio.run(go)
    except BrokerError as exc:
        print(f"brokerctl: {exc.code}: {exc.frame.get('message')}", file=sys.stderr)
        raise typer.Exit(1) from exc
    except OSError as exc:
        print(f"brokerctl: cannot reach the broker at {_socket()}: {exc}", file=sys.stderr)
        raise typer.Exit(2) from exc
    if _opts["json"]:
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


def main() -> None:
    os.environ.setdefault("COLUMNS", "160")
    app()
