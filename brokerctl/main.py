"""`brokerctl`: the operator's command line.

Each command is one op of the wire protocol; `--json` prints the raw data,
otherwise a readable table.

The commands that need the ledger, the config model or the terminal adapter import
them inside themselves: every call of brokerctl pays for its imports before it says
anything, and most commands are one op over the socket (docs/performance.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import orjson
import typer

from brokerctl import (  # noqa: F401 - their commands register on `app`
    audit,
    close,
    context,
    encryption,
    erase,
    files,
    merges,
    messaging,
    names,
    resume,
    routes,
    state,
    threads,
    timers,
    top,
    workers,
)
from brokerctl.app import app, call, console, current_socket, hoist_globals, opts, print_table
from core.queue_machine import QueueMode
from wire.client import BrokerClient, BrokerError

if TYPE_CHECKING:
    from broker.config import LedgerSettings
    from ledger.port.cipher import Key


@app.command()
def health() -> None:
    """Is the broker up, and how busy is it."""

    def render(d: dict[str, Any]) -> None:
        print_table("health", ["key", "value"], [[k, v] for k, v in d.items()])

    call("health", render)


def who(person: dict[str, Any] | None) -> str:
    """A session's person, for a table: `Ann Lee (terminal:ann, mail:ann@x.org)`."""
    if not person:
        return ""
    channels = ", ".join(person.get("channels") or ())
    name = person.get("name") or person.get("entity") or ""
    return f"{name} ({channels})" if channels else name


@app.command()
def sessions(
    status: Annotated[str | None, typer.Option(help="Only sessions with this status.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 100,
) -> None:
    """List sessions, most recently active first."""

    def render(rows: list[dict[str, Any]]) -> None:
        print_table(
            "sessions",
            ["label", "person", "status", "state", "thread", "turns", "queued", "parent"],
            [
                [
                    r["label"],
                    who(r.get("person")),
                    r["status"],
                    r["state"],
                    r.get("thread"),
                    r["turns"],
                    r["queued"],
                    r["parent"],
                ]
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
            f"head={d['head']} aliases={', '.join(d['aliases']) or '-'}",
            highlight=False,
        )
        if d.get("person"):
            console.print(f"with {who(d['person'])}", highlight=False, markup=False)
        if d.get("merged_into"):
            console.print(f"merged into {d['merged_into']}")
        print_table(
            "queue",
            ["item", "status", "mode", "msg_id", "reason", "text"],
            [
                [q["item"], q["status"], q["mode"], q["msg_id"], q["reason"], q["preview"]]
                for q in d["queued"]
            ],
        )
        print_table(
            "turns",
            ["id", "type", "title", "outcome", "inputs", "output"],
            [
                [
                    t["id"],
                    t["type"],
                    t.get("title") or "",
                    t.get("outcome") or t["status"],  # a running turn has none yet
                    ",".join(t["inputs"]),
                    (t["output"] or "")[-60:]
                    if t["status"] == "running"
                    else (t["output"] or "")[:60],
                ]
                for t in d["turns"]
            ],
        )

    call("session.show", render, session=session, limit=limit)


@app.command()
def contact(channel: str, sender_id: str) -> None:
    """Who a channel's sender is: entity, canonical entity, session."""

    def render(d: dict[str, Any]) -> None:
        print_table(
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
        print_table(
            "aliases", ["alias", "session"], [[a["alias"], a["session"]] for a in d["aliases"]]
        )

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
        async with await BrokerClient.connect(current_socket()) as client:
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
        print(f"brokerctl: the broker at {current_socket()} went away", file=sys.stderr)
        raise typer.Exit(2) from exc


def _print_log(frame: dict[str, Any]) -> None:
    if opts["json"]:
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
    from adapters.terminal import ChatConfig, chat_in_terminal  # here: a fast start

    cfg = ChatConfig(socket or current_socket(), channel, sender, name, mode, token, status, wait)
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
    from ledger.port.errors import LedgerLookupError  # here: a fast start
    from ledger.transfer import export_session
    from plumbing.ids import now_ms

    ledger = _ledger_settings()
    out = output.open("wb") if output else sys.stdout.buffer
    try:
        export_session(
            ledger.path, ledger.synchronous, session, now_ms(), out.write, _ledger_key(ledger)
        )
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
    from ledger.port.errors import (
        LedgerLookupError,  # here: a fast start
        LedgerWriteFailed,
    )
    from ledger.sessions import ImportError_
    from ledger.transfer import import_session
    from plumbing.ids import now_ms

    ledger = _ledger_settings()
    try:
        lines = source.read_bytes().splitlines()
        made, turns = import_session(
            ledger.path, ledger.synchronous, lines, label, now_ms(), _ledger_key(ledger)
        )
    except (ImportError_, LedgerLookupError, LedgerWriteFailed, OSError) as exc:
        print(f"brokerctl: import failed, nothing was written: {exc}", file=sys.stderr)
        raise typer.Exit(1) from exc
    console.print(f"imported {turns} turn(s) as {made}")


def _ledger_settings() -> LedgerSettings:
    from broker.config import ConfigError, load_settings  # here: a fast start

    try:
        settings = load_settings(opts["config"])
    except ConfigError as exc:
        print(f"brokerctl: {exc}", file=sys.stderr)
        raise typer.Exit(78) from exc
    if not settings.ledger.path.exists():
        print(f"brokerctl: no ledger at {settings.ledger.path}", file=sys.stderr)
        raise typer.Exit(1)
    return settings.ledger


def _ledger_key(ledger: LedgerSettings) -> Key | None:
    """The ledger's key (`[ledger] key_file`), or None; exit 78 when it is unusable."""
    from broker.config import ConfigError  # here: a fast start

    try:
        return ledger.key()
    except ConfigError as exc:
        print(f"brokerctl: {exc}", file=sys.stderr)
        raise typer.Exit(78) from exc


@app.command()
def backup(
    target: Annotated[Path, typer.Argument(help="Where to write the copy (must not exist).")],
) -> None:
    """Copy the ledger consistently while the daemon runs (SQLite online backup)."""
    from broker.config import ConfigError, load_settings
    from brokerctl.served import served_ledger
    from ledger.port.errors import LedgerError
    from ledger.transfer import backup as backup_ledger  # here: a fast start

    try:
        settings = load_settings(opts["config"]).ledger
    except ConfigError as exc:
        print(f"brokerctl: {exc}", file=sys.stderr)
        raise typer.Exit(78) from exc
    ledger = served_ledger(opts["socket"], settings.path)
    if not ledger.is_file():
        print(f"brokerctl: no ledger at {ledger}", file=sys.stderr)
        raise typer.Exit(1)
    if target.exists():
        print(f"brokerctl: {target} exists; choose a new file", file=sys.stderr)
        raise typer.Exit(1)
    try:
        problems = backup_ledger(ledger, target, _ledger_key(settings))
    except LedgerError as exc:  # a wrong key, or a key for a plain ledger
        print(f"brokerctl: {exc}", file=sys.stderr)
        raise typer.Exit(65) from exc
    if problems:
        print(f"brokerctl: the copy fails its integrity check: {problems[:3]}", file=sys.stderr)
        raise typer.Exit(1)
    console.print(f"backed up {ledger} to {target} ({target.stat().st_size} bytes)")


@app.command("mcp")
def mcp_serve() -> None:
    """Serve the broker as an MCP server on stdio (docs/mcp.md; the `mcp` extra)."""
    try:
        from brokerctl.mcp import serve  # here: a fast start
    except ImportError as exc:
        print(f"brokerctl: mcp needs the optional package mcp ({exc})", file=sys.stderr)
        raise typer.Exit(1) from exc
    serve(current_socket())


@app.command()
def doctor() -> None:
    """Check the config, socket, daemon, ledger and stuck sessions; say what to fix."""
    from brokerctl.doctor import run_checks

    findings = anyio.run(run_checks, opts["config"], opts["socket"])
    if opts["json"]:
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


def main() -> None:
    os.environ.setdefault("COLUMNS", "160")
    app(args=hoist_globals(sys.argv[1:]), prog_name="brokerctl")
