"""What a newcomer meets setting up an engine: an engine setting that cannot work
stops the daemon at start with exit 78 naming the key, and every `[engine]`
example of `docs/engines.md` answers a message as written, the `openai` one
against the fake server the broker ships (`python -m broker.engines.fake_openai`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from adapters.sdk import Adapter
from broker.config import EX_CONFIG
from tests.harness import brokerd_once, write_config
from tests.integration.test_adapters import next_deliver
from tests.integration.wire import running_daemon, uniq

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "engines.md"
BLOCK = re.compile(r"```toml\n(.*?)```", re.DOTALL)


def doc_examples() -> list[dict[str, Any]]:
    examples = [tomllib.loads(text) for text in BLOCK.findall(DOC.read_text())]
    return [e for e in examples if "engine" in e]


def refused(tmp_path: Path, engine: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "broker.toml"
    write_config(
        config,
        {
            "socket_path": str(tmp_path / "s.sock"),
            "ledger": {"path": str(tmp_path / "l.db")},
            "engine": engine,
        },
    )
    return brokerd_once(config)


@pytest.mark.parametrize("key", ["sk-…", "sk-abc def", "sk-abc\t"])
def test_an_api_key_that_cannot_go_in_a_header_stops_the_start(tmp_path: Path, key: str) -> None:
    done = refused(tmp_path, {"kind": "openai", "api_key": key})
    assert done.returncode == EX_CONFIG, done.stderr
    assert "engine.api_key" in done.stderr and "ASCII" in done.stderr
    assert not (tmp_path / "l.db").exists()  # nothing was started


def test_a_subprocess_engine_without_a_command_is_a_config_error(tmp_path: Path) -> None:
    done = refused(tmp_path, {"kind": "subprocess"})
    assert done.returncode == EX_CONFIG, done.stderr
    assert "engine" in done.stderr and "command" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_persona_engine_is_checked_the_same(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text(
        f'socket_path = "{tmp_path / "s.sock"}"\n'
        '[engines.cheap]\nkind = "openai"\napi_key = "sk-…"\n'
    )
    done = brokerd_once(config)
    assert done.returncode == EX_CONFIG, done.stderr
    assert "engines.cheap.api_key" in done.stderr


def test_the_doc_shows_an_example_of_each_engine_it_documents() -> None:
    kinds = sorted(e["engine"]["kind"] for e in doc_examples())
    assert kinds == ["openai", "python", "subprocess"]


@pytest.fixture
def fake_openai() -> Iterator[str]:
    """`python -m broker.engines.fake_openai --port 0`, as a person runs it; its URL."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        [sys.executable, "-m", "broker.engines.fake_openai", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            found = re.search(r"http://127\.0\.0\.1:\d+/v1", line)
            assert found, line
            yield found.group(0)
        finally:
            proc.terminate()
            assert proc.wait(timeout=10) == 0


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("kind", ["subprocess", "openai"])
async def test_each_doc_example_answers_a_message(kind: str, fake_openai: str) -> None:
    [example] = [e for e in doc_examples() if e["engine"]["kind"] == kind]
    engine = dict(example["engine"])
    if kind == "openai":  # the doc's port, 8080, may be taken on a shared machine
        assert engine["base_url"] == "http://127.0.0.1:8080/v1"
        engine["base_url"] = fake_openai
    with running_daemon({"engine": engine, "queue": {"debounce_ms": 0}}) as daemon:
        # The doc's relative paths are the repository's.
        (daemon.workdir / "examples").symlink_to(ROOT / "examples")
        async with Adapter.connect(daemon.socket, uniq("c")) as adapter:
            await adapter.send(uniq("m"), "ann", "hello engine")
            with anyio.fail_after(30):
                reply = await next_deliver(adapter)
            await adapter.confirm(reply.out_id)
    assert reply.status == "final", reply.text
    assert "hello engine" in reply.text.lower()
    if kind == "openai":
        assert reply.text == "You said: hello engine"


def test_an_env_key_that_cannot_go_in_a_header_stops_the_start(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    write_config(
        config,
        {
            "socket_path": str(tmp_path / "s.sock"),
            "ledger": {"path": str(tmp_path / "l.db")},
            "engine": {"kind": "openai"},
        },
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    done = subprocess.run(
        [sys.executable, "-m", "broker", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**env, "OPENAI_API_KEY": "sk-…"},
        check=False,
    )
    assert done.returncode == EX_CONFIG, done.stderr
    assert "OPENAI_API_KEY" in done.stderr
    assert not (tmp_path / "l.db").exists()
