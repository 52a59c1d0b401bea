"""Personas choose their engine: a route gives one sender a persona with another engine,
and a fork of that sender's session keeps it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import DaemonFactory
from tests.harness import brokerd_once
from tests.integration.test_events import chat
from tests.integration.wire import Adapter, op, show

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


@pytest.mark.anyio
async def test_a_fork_keeps_the_persona_of_the_session_it_forks(
    make_daemon: DaemonFactory, short_tmp: Path, anyio_backend: str
) -> None:
    # The route gives a persona only to the session it creates; a fork is created by
    # `/fork` (and `session.fork`), not by a route, so its persona is the one copied.
    work = short_tmp / "fork-persona"
    work.mkdir()
    policies = work / "policies.toml"
    policies.write_text(ROUTE.replace("[[routes]]", "[[rules]]"))
    d = make_daemon(
        {
            "policies_file": str(policies),
            "engines": {"shout": {"kind": "subprocess", "command": [sys.executable, EXAMPLE]}},
            "personas": {"loud": {"engine": "shout", "system_prompt": "Be loud."}},
        },
        backend=anyio_backend,
        name="fork-persona",
    )
    async with await Adapter.connect(d, "sms") as a:
        home = (await a.send_inbound("m1", "first words", "+9", mode="followup"))["session"]
        reply = await a.deliver(msg_id="m1")
        await a.confirm(reply["out_id"])
        assert reply["text"].replace(" ", "") == "FIRSTWORDS"
        await a.send_inbound("m2", "/fork", "+9", mode="followup")
        forked = await a.deliver(msg_id="m2")
        await a.confirm(forked["out_id"])
        fork = (await a.send_inbound("m3", "on the fork", "+9", mode="followup"))["session"]
        reply = await a.deliver(msg_id="m3")
        await a.confirm(reply["out_id"])
    assert fork != home and fork.startswith("fork:")
    assert reply["text"].replace(" ", "") == "ONTHEFORK"  # the persona's engine answered
    shown = await show(d, fork)
    assert (shown["persona"], shown["parent"], shown["origin"]) == ("loud", home, "fork")
    # An operator's fork of the same turn keeps it too.
    by_op = (await op(d, "session.fork", turn=shown["turns"][0]["id"]))["label"]
    assert (await show(d, by_op))["persona"] == "loud"
    with d.db() as db:
        engines = {
            r[0] for r in db.execute("SELECT engine FROM turns WHERE session_label = ?", (fork,))
        }
    assert engines == {"subprocess"}


def test_unknown_persona_engine_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text(f'socket_path = "{tmp_path}/s.sock"\n[personas.loud]\nengine = "nope"\n')
    done = brokerd_once(config)
    assert done.returncode == 78 and "personas.loud.engine" in done.stderr
