"""Personas choose their engine: a route gives one sender a persona with another engine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import DaemonFactory
from tests.harness import brokerd_once
from tests.integration.test_events import chat

asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])
EXAMPLE = str(Path(__file__).parents[2] / "examples" / "engine_echo.py")
ROUTE = '\n[[routes]]\nname = "vip"\nmatch = { sender = ["+9"] }\nsession = { persona = "loud" }\n'


@pytest.mark.anyio
@asyncio_only
async def test_persona_engine(make_daemon: DaemonFactory, short_tmp: Path) -> None:
    work = short_tmp / "persona"
    work.mkdir()
    policies = work / "policies.toml"
    policies.write_text(ROUTE.replace("[[routes]]", "[[rules]]"))
    d = make_daemon(
        {
            "policies_file": str(policies),
            "engines": {"shout": {"kind": "subprocess", "command": [sys.executable, EXAMPLE]}},
            "personas": {"loud": {"engine": "shout", "system_prompt": "Be loud."}},
        },
        name="persona",
    )
    plain = await chat(d.socket, ["quiet words"])
    loud = await chat(d.socket, ["quiet words"], prefix="vip-", sender="+9")
    assert plain[0]["text"] == "quiet words"
    assert loud[0]["text"].replace(" ", "") == "QUIETWORDS"
    with d.db() as db:
        engines = {r[0] for r in db.execute("SELECT engine FROM turns")}
    assert engines == {"echo", "subprocess"}


def test_unknown_persona_engine_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text(f'socket_path = "{tmp_path}/s.sock"\n[personas.loud]\nengine = "nope"\n')
    done = brokerd_once(config)
    assert done.returncode == 78 and "personas.loud.engine" in done.stderr
