"""The README's five-minute tour runs as written, against a real daemon.

The tour's commands are read from README.md itself, not copied here: its
indented blocks are shell commands, run in order in one shell, and a block
whose lines show what a person types after `> ` is the input of the `chat`
command before it. The daemon runs as `scripts/daemon` runs it (the example
configuration, from the checkout's folder), less the set-up.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


@dataclass
class Step:
    command: str
    typed: list[str] = field(default_factory=list)  # a chat's input lines
    shown: list[str] = field(default_factory=list)  # what the README says it prints


def tour_steps(readme: str) -> list[Step]:
    """The tour's commands in order, each chat with the lines typed into it."""
    section = readme.split("## A five-minute tour\n", 1)[1].split("\n## ", 1)[0]
    # Paragraphs of the indented (code) lines, blank lines between them.
    blocks: list[list[str]] = [[]]
    for line in section.splitlines():
        if line.startswith("    "):
            blocks[-1].append(line[4:])
        elif blocks[-1]:
            blocks.append([])
    steps: list[Step] = []
    for block in filter(None, blocks):
        if any(line.startswith("> ") for line in block):
            assert steps and " chat " in steps[-1].command, block
            steps[-1].typed = [line[2:] for line in block if line.startswith("> ")]
            steps[-1].shown = [line for line in block if not line.startswith("> ")]
        else:
            steps += [Step(line) for line in block]
    return steps


def script_of(steps: list[Step]) -> str:
    lines = ["set -euo pipefail"]
    for n, step in enumerate(steps):
        command = step.command.replace(".venv/bin/", f"{VENV_BIN}/")
        lines.append(f"echo '@@@ {n}'")
        if step.typed:
            typed = " ".join(f"'{text}'" for text in step.typed)
            command = f"printf '%s\\n' {typed} | {command}"
        lines.append(command)
    return "\n".join(lines) + "\n"


def outputs(stdout: str, count: int) -> list[str]:
    parts = stdout.split("@@@ ")[1:]
    assert [int(part.split("\n", 1)[0]) for part in parts] == list(range(count)), stdout
    return [part.split("\n", 1)[1] for part in parts]


def serving(path: Path) -> bool:
    if not path.exists():
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def test_the_tour_reads_its_chats_and_commands() -> None:
    steps = tour_steps((ROOT / "README.md").read_text())
    commands = [step.command for step in steps]
    assert commands[:2] == ["export BROKER_SOCKET=var/broker.sock", ".venv/bin/brokerctl health"]
    chats = [step for step in steps if step.typed]
    assert [chat.typed for chat in chats] == [
        ["hello there", "/status"],
        ["/switch what-if", "what if we tried the other way?"],
    ]
    assert any(" fork " in command for command in commands)
    assert commands[-1].endswith(" doctor")


def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    steps = tour_steps((ROOT / "README.md").read_text())
    (tmp_path / "config").mkdir()
    shutil.copy(ROOT / "config" / "broker.example.toml", tmp_path / "config")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env |= {"PATH": f"{VENV_BIN}:{env.get('PATH', '')}", "COLUMNS": "200"}
    log = (tmp_path / "daemon.log").open("wb")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "broker", "--config", "config/broker.example.toml"],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 60
        while not serving(tmp_path / "var" / "broker.sock"):
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "daemon.log").read_text()
            time.sleep(0.05)
        run = subprocess.run(
            ["bash", "-c", script_of(steps)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=100,
        )
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        log.close()
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}"
    assert daemon.returncode == 0
    printed = outputs(run.stdout, len(steps))
    by_command: dict[str, list[str]] = {}
    for step, out in zip(steps, printed, strict=True):
        by_command.setdefault(step.command, []).append(out)
        for line in step.shown:  # what the README shows, but for ids it cannot know
            if "…" not in line and "ent_" not in line:
                assert line in out.splitlines(), (step.command, line, out)
    health = by_command[".venv/bin/brokerctl health"]
    assert all("True" in out for out in health)
    fork = next(out for command, outs in by_command.items() if " fork " in command for out in outs)
    assert fork.strip() == "forked: what-if"
    first_chat, second_chat = (out for step, out in zip(steps, printed, strict=True) if step.typed)
    assert "state: " in first_chat
    assert "now talks to what-if" in second_chat
    shown_fork = by_command[".venv/bin/brokerctl show what-if"][0]
    assert "hello there" in shown_fork and "what if we tried the other way?" in shown_fork
    shown_ann = by_command['.venv/bin/brokerctl show "$ann"']
    assert len(shown_ann) == 2 and all("hello there" in out for out in shown_ann)
    assert not any("what if we tried" in out for out in shown_ann)
    doctor = printed[-1]
    assert "ok daemon" in doctor and "ok ledger" in doctor
