"""Turn summaries, the `summary` context mode and the turn-start snapshot on a real
daemon (docs/turns.md, "Summaries and snapshots"), on asyncio and trio.

A `python` engine reads a file, writes one and decides at every turn, and answers with
what its context held: the summaries of earlier turns and the verbatim history. Its
workspace is a real git checkout made here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from broker.mailbox.turn_parts import ARCHIVE_LINES
from tests.conftest import DaemonFactory
from tests.integration.wire import Adapter, op, uniq

pytestmark = pytest.mark.anyio

ENGINE = """
import json

from broker.engines import EngineResult


class Worker:
    name = "worker"
    accepts_steering = False
    context_window = 8192

    def __init__(self, config):
        self.workspace = config.get("ws") or None

    async def run(self, request, io):
        said = " ".join(m.content for m in request.inputs)
        n = said.split()[-1]
        io.event("action", {"tool": "read_file", "args": {"path": f"src/{n}.py"}})
        io.event("file", {"path": f"out/{n}.txt", "op": "write", "content": said})
        io.event("decision", {"text": f"keep step {n}"})
        system = [m.content for m in request.history if m.role == "system"]
        told = {
            "summaries": [s.splitlines()[1] for s in system if s.startswith("An earlier turn")],
            "verbatim": [m.content for m in request.history if m.role != "system"],
        }
        return EngineResult(text=json.dumps(told), model="mine", metadata={"step": n})

    async def aclose(self):
        return None


def factory(config):
    return Worker(config)
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def checkout(folder: Path) -> Path:
    repo = folder / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "first")
    (repo / "a.txt").write_text("two\n")  # dirty, not staged
    (repo / "b.txt").write_text("new\n")
    git(repo, "add", "b.txt")  # staged
    return repo


def config(engines: Path, repo: Path, policies: Path) -> dict[str, Any]:
    (engines / "summary_engine.py").write_text(ENGINE)
    policies.write_text(
        '[[rules]]\nname = "all"\nmatch = { sender = ["+1"] }\nsession = { persona = "brief" }\n'
    )
    return {
        "policies_file": str(policies),
        "engine": {"kind": "python", "entry": "summary_engine:factory", "ws": str(repo)},
        "personas": {
            "brief": {
                "system_prompt": "You are brief.",
                "context_mode": "summary",
                "summary_turns": 2,
                "verbatim_turns": 1,
            }
        },
        "queue": {"debounce_ms": 0},
    }


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_summary_mode_turns_carry_summaries_and_start_with_a_snapshot(
    make_daemon: DaemonFactory, short_tmp: Path, backend: str
) -> None:
    work = short_tmp / "d"
    work.mkdir(parents=True, exist_ok=True)
    repo = checkout(short_tmp / "git")
    d = make_daemon(config(work, repo, work / "policies.toml"), backend=backend)
    told: list[dict[str, Any]] = []
    async with await Adapter.connect(d, uniq("t")) as a:
        session = None
        for n in range(1, 5):
            acked = await a.send_inbound(uniq("m"), f"step {n}", "+1")
            session = acked["session"]
            reply = await a.deliver(session=session)
            assert reply["status"] == "final"
            told.append(json.loads(reply["text"]))
    assert session is not None
    # The fourth turn saw turn 3 verbatim and the summaries of turns 1 and 2 in its
    # place of the older turns: what each did, mechanically.
    assert told[3]["verbatim"][0] == "step 3"
    assert len(told[3]["summaries"]) == 2
    first, second = told[3]["summaries"]
    assert first.startswith("- step 1: completed: ")
    assert second.startswith("- step 2: completed: ")
    assert told[0] == {"summaries": [], "verbatim": []}
    shown = await op(d, "session.show", session=session)
    turn = shown["turns"][0]
    assert turn["summary"] == {
        "actions_taken": ["read_file src/1.py", "write out/1.txt"],
        "decisions": ["keep step 1"],
        "files_read": ["src/1.py"],
        "files_modified": ["out/1.txt"],
        "outcome": "completed: " + json.dumps({"summaries": [], "verbatim": []}),
    }
    assert turn["metadata"] == {"step": "1"}
    prompt = f"You are brief.\n\n{ARCHIVE_LINES}"  # the persona's, then Layer C's lines
    assert (shown["system_prompt"], shown["model"]) == (prompt, "mine")
    # Every turn starts with a snapshot after its intent: the workspace's git state and
    # the files the thread knew then, as their latest change left them.
    snaps = await op(d, "events.query", session=session, type="snapshot", limit=50)
    starts = sorted(
        (e for e in snaps if e["payload"].get("snapshot_type") == "turn_start"),
        key=lambda e: e["session_seq"],
    )
    assert len(starts) == 4 and all(e["seq"] == 1 for e in starts)
    head = git(repo, "rev-parse", "HEAD")
    for n, event in enumerate(starts):
        p = event["payload"]
        assert (p["git_head"], p["git_branch"]) == (head, "main")
        assert (p["git_dirty"], p["git_staged"]) == (["a.txt"], ["b.txt"])
        assert [f["path"] for f in p["files"]] == [f"out/{k}.txt" for k in range(1, n + 1)]
    assert starts[1]["payload"]["files"][0]["sha256"] is not None
    # The session's events are numbered 1, 2, 3... without a gap, across its turns.
    every = await op(d, "events.query", session=session, limit=200)
    assert sorted(e["session_seq"] for e in every) == list(range(1, len(every) + 1))
