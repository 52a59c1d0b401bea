"""Recall by meaning in a real daemon, on asyncio and trio: the indexer embeds messages
after their turns, an agent's `conversation_recall` with mode `meaning` finds what its
person said in other words and never another person's, and with no model the mode is
a clear tool error while the daemon serves on."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.integration.test_events import chat
from wire.client import BrokerClient, BrokerError

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

ENGINE = textwrap.dedent("""
    import json, sys
    turn = json.loads(sys.stdin.readline())
    text = "\\n".join(m["content"] for m in turn["inputs"])
    if text.startswith("recall "):
        mode, query = text[7:].split(" ", 1)
        print(json.dumps({"type": "tool_call", "id": "c1", "name": "conversation_recall",
                          "arguments": {"action": "search", "query": query, "mode": mode}}),
              flush=True)
        text = json.loads(sys.stdin.readline())["content"]
    else:
        text = "noted"
    print(json.dumps({"type": "final", "text": text}), flush=True)
""")
ALICE_SAID = "remember to keep checking the token's signature on each request"
BOB_SAID = "bob verifies every JWT signature by hand"


async def indexed(socket: Path, session: str, wanted: str) -> list[dict[str, Any]]:
    """Wait (bounded) until a search by meaning finds `wanted` in `session`."""
    with anyio.fail_after(90):
        async with await BrokerClient.connect(socket) as op:
            while True:
                hits: list[dict[str, Any]] = await op.op(
                    "recall.search", query="JWT validation", session=session, mode="meaning"
                )
                if any(wanted in h["snippet"] for h in hits):
                    return hits
                await anyio.sleep(0.2)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_an_agent_recalls_by_meaning_its_own_person_only(
    make_daemon: DaemonFactory, tmp_path: Path, backend: str
) -> None:
    program = tmp_path / "engine.py"
    program.write_text(ENGINE)
    engine = {"kind": "subprocess", "command": [sys.executable, str(program)]}
    d = make_daemon({"engine": engine, "recall": {"model_dir": "auto"}}, backend=backend)
    alice = (await chat(d.socket, [ALICE_SAID, "what's for lunch"], sender="+1"))[0]
    (bob,) = await chat(d.socket, [BOB_SAID], prefix="b", sender="+2")
    await indexed(d.socket, alice["session"], "token's signature")
    await indexed(d.socket, bob["session"], "JWT signature")

    (found,) = await chat(d.socket, ["recall meaning JWT validation"], prefix="r", sender="+1")
    text = found["text"]
    assert "token's signature" in text  # not one word in common with the query
    assert "JWT signature" not in text and "bob" not in text  # never another person's
    (words,) = await chat(d.socket, ["recall words JWT validation"], prefix="w", sender="+1")
    assert "token's signature" not in words["text"]  # by words, nothing of it matches
    (both,) = await chat(d.socket, ["recall both JWT validation"], prefix="x", sender="+1")
    assert "token's signature" in both["text"] and "JWT signature" not in both["text"]
    if backend == "asyncio":  # the operator's command line, once
        args = ["recall", "JWT validation", "--mode", "meaning", "--session", alice["session"]]
        done = await anyio.to_thread.run_sync(ctl, d.config_path, args)
        assert done.returncode == 0, done.stderr
        assert "token's signature" in done.stdout and "bob" not in done.stdout


def ctl(config: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "brokerctl", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_without_a_model_meaning_is_a_clear_tool_error(
    make_daemon: DaemonFactory, tmp_path: Path
) -> None:
    program = tmp_path / "engine.py"
    program.write_text(ENGINE)
    engine = {"kind": "subprocess", "command": [sys.executable, str(program)]}
    d = make_daemon({"engine": engine, "recall": {"model_dir": ""}})
    replies = await chat(d.socket, ["hello there", "recall meaning greetings"])
    assert "mode 'meaning' is off on this broker" in replies[1]["text"]
    broken = tmp_path / "no-model"
    broken.mkdir()
    d2 = make_daemon({"engine": engine, "recall": {"model_dir": str(broken)}}, name="d2")
    replies = await chat(d2.socket, ["hello there", "recall meaning greetings"])
    assert "mode 'meaning' is unavailable" in replies[1]["text"]
    assert "has no config.json" in replies[1]["text"]
    (after,) = await chat(d2.socket, ["recall words hello"], prefix="z")
    assert "**hello** there" in after["text"]  # the daemon serves on
    async with await BrokerClient.connect(d.socket) as op:
        with pytest.raises(BrokerError, match="recall by meaning is off"):
            await op.op("recall.search", query="greetings", mode="meaning")
        with pytest.raises(BrokerError, match="mode must be one of"):
            await op.op("recall.search", query="greetings", mode="vibes")


HINT_ENGINE = """
from broker.engines import EngineResult


class Hinted:
    name = "hinted"
    accepts_steering = False
    context_window = 8192

    async def run(self, request, io):
        hints = [n for n in request.notes if n.startswith("[Recall hint")]
        return EngineResult(text=" | ".join(hints) or "none")

    async def aclose(self):
        return None


def factory(config):
    return Hinted()
"""


async def test_a_summary_mode_hint_points_at_mode_both(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    work = short_tmp / "d"  # the daemon's own folder: its python engines load from there
    work.mkdir(parents=True, exist_ok=True)
    (work / "hint_engine.py").write_text(HINT_ENGINE)
    policies = work / "policies.toml"
    policies.write_text(
        '[[rules]]\nname = "all"\nmatch = { sender = ["+1"] }\nsession = { persona = "brief" }\n'
    )
    persona = {"system_prompt": "Brief.", "context_mode": "summary", "verbatim_turns": 1}
    cfg: dict[str, Any] = {
        "policies_file": str(policies),
        "engine": {"kind": "python", "entry": "hint_engine:factory"},
        "personas": {"brief": {**persona, "summary_turns": 1}},
    }
    d = make_daemon({**cfg, "recall": {"model_dir": "auto"}})
    said = ["the deploy key rotates", "lunch plans", "more lunch", "like we discussed, go on"]
    replies = await chat(d.socket, said, prefix="h", sender="+1")
    hint = replies[3]["text"]
    assert "Recall hint" in hint and "mode 'both'" in hint
    (short_tmp / "d2").mkdir(exist_ok=True)
    (short_tmp / "d2" / "hint_engine.py").write_text(HINT_ENGINE)
    off = make_daemon(cfg, name="d2")  # the tests' default: no recall by meaning
    replies = await chat(off.socket, said, prefix="h", sender="+1")
    assert "Recall hint" in replies[3]["text"] and "mode" not in replies[3]["text"]
