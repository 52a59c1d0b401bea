"""`kind = "python"` (docs/engines.md): the operator's engine in the daemon's process.

It replies on asyncio and on trio, made by a factory from the `[engine]` table; an
engine that raises or hangs fails its turn and the session goes on; one that blocks
the loop is named in a warning with how long; an entry that cannot be loaded stops
the daemon at start with exit 78 naming `engine.entry`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonFactory
from tests.harness import brokerd_once, write_config
from tests.integration.wire import Adapter, op, turns, uniq

pytestmark = pytest.mark.anyio

ENGINES = """
import time

import anyio

from broker.engines import EngineError, EngineResult


class Reply:
    name = "reply"
    accepts_steering = False
    context_window = 8192

    def __init__(self, config=None):
        self.prefix = (config or {}).get("prefix", "you said: ")

    async def run(self, request, io):
        said = " ".join(m.content for m in request.inputs)
        if said == "boom":
            raise RuntimeError("boom")
        if said == "refuse":
            raise EngineError("I will not do that")
        if said == "hang":
            await anyio.sleep_forever()
        if said == "block":
            time.sleep(2)
        text = self.prefix + said
        await io.delta(text)
        return EngineResult(text=text, model="mine")

    async def aclose(self):
        return None


engine = Reply()


def factory(config):
    return Reply(config)


not_an_engine = 42


def bad_factory(config):
    return "nope"
"""


def engine_module(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "my_engines.py").write_text(ENGINES)
    (folder / "broken_engine.py").write_text("raise ImportError('needs a package it lacks')\n")
    (folder / "raising_engine.py").write_text("raise RuntimeError('OPENAI_API_KEY is not set')\n")
    (folder / "exiting_engine.py").write_text("import sys\nsys.exit('no model, giving up')\n")


def python_engine(entry: str, **more: Any) -> dict[str, Any]:
    return {
        "engine": {"kind": "python", "entry": entry, "timeout_s": 3, **more},
        "queue": {"debounce_ms": 0},
    }


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_a_python_engine_made_by_a_factory_replies_on_both_loops(
    make_daemon: DaemonFactory, short_tmp: Path, backend: str
) -> None:
    engine_module(short_tmp / "d")
    d = make_daemon(python_engine("my_engines:factory", prefix="heard: "), backend=backend)
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(uniq("m"), "hello", uniq("+")))["session"]
        told = await a.deliver(session=session)
    assert (told["status"], told["text"]) == ("final", "heard: hello")
    (turn,) = turns(d, session)
    assert turn["status"] == "completed"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_an_engine_that_raises_or_hangs_fails_its_turn_and_the_daemon_goes_on(
    make_daemon: DaemonFactory, short_tmp: Path, backend: str
) -> None:
    engine_module(short_tmp / "d")
    d = make_daemon(python_engine("my_engines:engine"), backend=backend)
    sender = uniq("+")
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(uniq("m"), "boom", sender))["session"]
        crashed = await a.deliver(session=session)
        await a.send_inbound(uniq("m"), "refuse", sender)
        refused = await a.deliver(session=session)
        await a.send_inbound(uniq("m"), "hang", sender)
        hung = await a.deliver(session=session, within=10)
        await a.send_inbound(uniq("m"), "still there?", sender)
        fine = await a.deliver(session=session)
    assert crashed["status"] == "failed" and "RuntimeError" in crashed["text"]
    assert (refused["status"], refused["text"]) == ("failed", "I will not do that")
    assert hung["status"] == "failed" and "too long" in hung["text"]
    assert (fine["status"], fine["text"]) == ("final", "you said: still there?")
    assert [t["reason"] for t in turns(d, session)[:3]] == ["engine", "engine", "timeout"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_an_engine_that_blocks_the_loop_is_named_with_how_long(
    make_daemon: DaemonFactory, short_tmp: Path, backend: str
) -> None:
    engine_module(short_tmp / "d")
    d = make_daemon(python_engine("my_engines:engine", timeout_s=10), backend=backend)
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(uniq("m"), "block", uniq("+")))["session"]
        told = await a.deliver(session=session)
    assert told["status"] == "final"
    warnings = [json.loads(line) for line in d.log_lines() if "blocked the event loop" in line]
    assert len(warnings) == 1, d.log()
    (warning,) = warnings
    assert warning["engine"] == "reply" and warning["level"] == "warning"
    assert 1.5 <= warning["blocked_s"] <= 3, warning
    assert "anyio.to_thread.run_sync" in warning["event"]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("my_engines", "is not of the form"),
        ("my_engines:", "is not of the form"),
        ("broken_engine:engine", "importing broken_engine failed: ImportError"),
        ("no_such_module:engine", "importing no_such_module failed: ModuleNotFoundError"),
        ("raising_engine:engine", "importing raising_engine failed: RuntimeError: OPENAI_API"),
        ("exiting_engine:engine", "importing exiting_engine failed: SystemExit: no model"),
        ("my_engines:missing", "has no attribute 'missing'"),
        ("my_engines:not_an_engine", "is a int, neither an engine"),
        ("my_engines:bad_factory", "the factory returned a str, not an engine"),
    ],
)
def test_an_entry_that_cannot_be_loaded_stops_the_daemon_at_start(
    short_tmp: Path, entry: str, says: str
) -> None:
    """The module lives beside the config file, in a folder that is not the cwd."""
    folder = short_tmp / "conf"
    engine_module(folder)
    config = folder / "broker.toml"
    write_config(
        config,
        {
            "socket_path": str(short_tmp / "b.sock"),
            "ledger": {"path": str(short_tmp / "ledger.db")},
            **python_engine(entry),
        },
    )
    done = brokerd_once(config)
    assert done.returncode == 78, done.stderr
    assert "engine.entry" in done.stderr and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_an_engine_beside_the_config_file_is_found(short_tmp: Path) -> None:
    folder = short_tmp / "conf"
    engine_module(folder)
    config = folder / "broker.toml"
    write_config(
        config, {"ledger": {"path": str(short_tmp / "l.db")}, **python_engine("my_engines:engine")}
    )
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "broker", "--config", str(config), "--check-config"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=short_tmp,
    )
    assert done.returncode == 0, done.stderr


def test_keys_of_its_own_only_for_code_engines(short_tmp: Path) -> None:
    config = short_tmp / "broker.toml"
    write_config(
        config,
        {"ledger": {"path": str(short_tmp / "l.db")}, "engine": {"kind": "echo", "prefix": "x"}},
    )
    done = brokerd_once(config)
    assert done.returncode == 78
    assert "prefix" in done.stderr


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_example_engine_answers_and_keeps_a_note(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    example = Path(__file__).parents[2] / "examples" / "engine_python.py"
    (short_tmp / "d").mkdir()
    (short_tmp / "d" / "engine_python.py").write_text(example.read_text())
    d = make_daemon(python_engine("engine_python:make", greeting="Hi"))
    sender = uniq("+")
    async with await Adapter.connect(d, uniq("t")) as a:
        session = (await a.send_inbound(uniq("m"), "abc", sender, sender_name="Ann"))["session"]
        first = await a.deliver(session=session)
        await a.send_inbound(uniq("m"), "xyz", sender, sender_name="Ann")
        second = await a.deliver(session=session)
    assert first["text"] == "Hi, Ann! Turn 1; backwards: cba"
    assert second["text"] == "Hi, Ann! Turn 2; backwards: zyx"
    pad = await op(d, "scratchpad.get", session=session)
    assert pad == {"last_said": "xyz"}, pad
