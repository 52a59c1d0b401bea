"""Titles by a cheap model after the turn, off its path (`[titles] engine`): written
when the model answers, the mechanical title kept when it fails or hangs, and the
next turn never waits for it."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.integration.wire import Adapter, operator

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

# The titling model: names the exchange after the person's words, or hangs for
# an exchange about "hang", or fails for one about "fail".
TITLER = textwrap.dedent("""
    import json, sys, time
    turn = json.loads(sys.stdin.readline())
    text = turn["inputs"][0]["content"]
    if "hang" in text:
        time.sleep(5)
    if "fail" in text:
        print(json.dumps({"type": "error", "message": "no titles today"}), flush=True)
        sys.exit(0)
    said = text.split("Person: ")[1].split("\\n")[0]
    print(json.dumps({"type": "final", "text": '"About ' + said + '"'}), flush=True)
""")


def config(tmp_path: Path) -> dict[str, Any]:
    program = tmp_path / "titler.py"
    program.write_text(TITLER)
    return {
        "engines": {"cheap": {"kind": "subprocess", "command": [sys.executable, str(program)]}},
        "titles": {"engine": "cheap", "timeout_s": 0.5},
    }


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_a_model_titles_turns_after_them_and_never_holds_up_the_next(
    make_daemon: DaemonFactory, tmp_path: Path, backend: str
) -> None:
    d = make_daemon(config(tmp_path), backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        await a.send_inbound("m1", "the login page", "+1", mode="followup")
        first = await a.deliver(msg_id="m1")
        began = time.monotonic()
        await a.send_inbound("m2", "hang on", "+1", mode="followup")
        await a.deliver(msg_id="m2")
        await a.send_inbound("m3", "fail here", "+1", mode="followup")
        await a.deliver(msg_id="m3")
        # The titler hangs on m2's turn past its timeout; no reply waited for it.
        assert time.monotonic() - began < 0.5 + 2
    async with await operator(d) as op:
        with anyio.fail_after(10):
            while True:  # until the model's title is in and both failures are logged
                shown = await op.op("session.show", session=first["session"])
                titles = [(t["title"], t["title_source"]) for t in shown["turns"]]
                warned = [line for line in d.log_lines() if "no title by model" in line]
                if titles[0][1] == "model" and len(warned) == 2:
                    break
                await anyio.sleep(0.05)
    assert titles == [
        ("About the login page", "model"),
        ("hang on", "mechanical"),
        ("fail here", "mechanical"),
    ]
