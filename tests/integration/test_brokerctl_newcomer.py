"""brokerctl as a newcomer uses it, against a real daemon: `-s` honoured by the
commands that read the ledger file, from any folder; global options after the
command; `--version`; typer's shell completion; `send` and `recall`; and the
`/help` chat command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from adapters.sdk import Adapter
from tests import ledger_db
from tests.ctl import in_process
from tests.harness import DaemonProcess
from tests.integration.test_adapters import next_deliver
from tests.integration.wire import running_daemon, uniq

CTL = [sys.executable, "-c", "from brokerctl.main import main; main()"]
ROUTES = [{"name": "limited", "match": {"channel": ["limited"]}, "commands": ["status", "stop"]}]


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonProcess]:
    with running_daemon({"queue": {"debounce_ms": 0}}, routes=ROUTES) as d:
        yield d


def ctl(
    *args: str, cwd: Path, env: dict[str, str] | None = None, in_bash: bool = False
) -> subprocess.CompletedProcess[str]:
    """brokerctl run with `args`; `in_bash`: typed in a bash (`; exit` keeps bash there
    rather than replaced by brokerctl), as the shell it finds above it matters."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    shell = ["bash", "-c", '"$@"; exit $?', "bash"] if in_bash else []
    return subprocess.run(
        [*shell, *CTL, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**clean, **(env or {})},
        check=False,
    )


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout)


@pytest.mark.parametrize("where", ["before", "after"])
def test_doctor_checks_the_daemon_and_ledger_of_the_socket_given(
    daemon: DaemonProcess, tmp_path: Path, where: str
) -> None:
    sock = str(daemon.socket)
    args = (
        ["-s", sock, "doctor", "--json"] if where == "before" else ["doctor", "-s", sock, "--json"]
    )
    findings = as_json(ctl(*args, cwd=tmp_path))  # a folder with no config and no ledger
    assert {f["check"]: f["level"] for f in findings if f["level"] != "ok"} == {}
    [ledger] = [f["message"] for f in findings if f["check"] == "ledger"]
    assert str(daemon.ledger.resolve()) in ledger
    assert not (tmp_path / "var").exists()


@pytest.mark.parametrize("where", ["before", "after"])
def test_backup_copies_the_ledger_of_the_socket_given(
    daemon: DaemonProcess, tmp_path: Path, where: str
) -> None:
    sock, copy = str(daemon.socket), str(tmp_path / "copy.db")
    args = ["-s", sock, "backup", copy] if where == "before" else ["backup", "-s", sock, copy]
    done = ctl(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with ledger_db.connect(copy) as db:
        assert db.execute("SELECT count(*) FROM sessions").fetchone() is not None


def test_backup_with_a_socket_nobody_serves_says_so(tmp_path: Path) -> None:
    done = ctl("backup", "-s", str(tmp_path / "none.sock"), str(tmp_path / "copy.db"), cwd=tmp_path)
    assert done.returncode == 2
    assert "cannot ask the broker" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "copy.db").exists()


def test_json_may_follow_the_command(daemon: DaemonProcess, tmp_path: Path) -> None:
    after = as_json(ctl("sessions", "--json", "--socket", str(daemon.socket), cwd=tmp_path))
    before = as_json(ctl("--json", "-s", str(daemon.socket), "sessions", cwd=tmp_path))
    assert isinstance(after, list) and after == before


def test_version(tmp_path: Path) -> None:
    done = ctl("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, "brokerctl 0.1.0")


def test_shell_completion_completes_commands(tmp_path: Path) -> None:
    env = {
        "_BROKERCTL_COMPLETE": "complete_bash",
        "COMP_WORDS": "brokerctl sess",
        "COMP_CWORD": "1",
    }
    done = ctl(cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "sessions" in done.stdout.split()
    # typer names the shell it finds above brokerctl (shellingham), which under a test
    # runner may be none: asked as a person asks it, in bash.
    shown = ctl("--show-completion", cwd=tmp_path, in_bash=True)
    assert shown.returncode == 0, shown.stderr
    assert "_BROKERCTL_COMPLETE" in shown.stdout


def test_send_hands_a_task_to_a_new_session_and_recall_finds_it(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    sock = str(daemon.socket)
    word = uniq("zanzibar")
    sent = as_json(
        in_process("send", f"remember {word}", "--label-hint", "notes", "--json", "-s", sock)
    )
    assert set(sent) >= {"session", "item"}
    shown = as_json(in_process("show", sent["session"], "--json", "-s", sock))
    assert shown["label"] == sent["session"]
    hits: list[dict[str, Any]] = []
    for _ in range(250):  # the turn commits and is indexed: at most 5 s
        hits = as_json(in_process("recall", word, "--json", "-s", sock))
        if hits:
            break
        anyio.run(anyio.sleep, 0.02)
    assert hits and {h["session"] for h in hits} == {sent["session"]}
    human = in_process("recall", word, "-s", sock)
    assert human.returncode == 0 and sent["session"] in human.stdout


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.parametrize(
    ("channel", "listed", "not_listed"),
    [
        ("limited", ["/status", "/stop", "/help"], ["/fork", "/queue", "/new"]),
        (
            "open",
            ["/status", "/stop", "/queue", "/new", "/compact", "/fork", "/switch", "/help"],
            [],
        ),
    ],
)
async def test_help_lists_the_commands_the_route_allows(
    daemon: DaemonProcess, channel: str, listed: list[str], not_listed: list[str]
) -> None:
    async with Adapter.connect(daemon.socket, channel) as adapter:
        await adapter.send(uniq("m"), uniq("p"), "/help")
        reply = await next_deliver(adapter)
        await adapter.confirm(reply.out_id)
    assert reply.status == "final" and reply.turn is None
    said = {line.split(":")[0].split(" ")[0] for line in reply.text.splitlines()[1:]}
    assert said >= set(listed) and not said & set(not_listed), reply.text


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_sessions_and_show_name_the_person(daemon: DaemonProcess, tmp_path: Path) -> None:
    channel, sender = uniq("c"), uniq("ann")
    async with Adapter.connect(daemon.socket, channel) as adapter:
        ack = await adapter.send(uniq("m"), sender, "hello", sender_name="Ann Lee")
        reply = await next_deliver(adapter)
        await adapter.confirm(reply.out_id)
    sock = str(daemon.socket)
    rows = await anyio.to_thread.run_sync(
        lambda: as_json(in_process("sessions", "--json", "-s", sock))
    )
    [row] = [r for r in rows if r["label"] == ack.session]
    assert row["person"]["name"] == "Ann Lee"
    assert row["person"]["channels"] == [f"{channel}:{sender}"]
    wide = {"COLUMNS": "200"}  # no terminal here: rich would fold the table at 80 columns
    table = await anyio.to_thread.run_sync(lambda: in_process("sessions", "-s", sock, env=wide))
    assert f"Ann Lee ({channel}:{sender})" in table.stdout
    shown = await anyio.to_thread.run_sync(
        lambda: in_process("show", ack.session, "-s", sock, env=wide)
    )
    assert f"with Ann Lee ({channel}:{sender})" in shown.stdout, shown.stdout
