"""A config that chooses PostgreSQL or Temporal on an install without that extra:
brokerd stops with 78 (a config error, not restarted) and a sentence naming the
extra to install, not an ImportError's traceback.

The package is hidden from the daemon's interpreter (`sys.modules[name] = None`
makes its import raise ImportError), as on an install without the extra.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness import write_config

START_WITHOUT = (
    "import sys; sys.modules.update(dict.fromkeys({modules!r})); sys.argv = {argv!r}; "
    "from broker.daemon_cli import main; main()"
)


def brokerd_without(
    modules: list[str], config: Path, *flags: str
) -> subprocess.CompletedProcess[str]:
    argv = ["brokerd", *flags, "--config", str(config)]
    code = START_WITHOUT.format(modules=modules, argv=argv)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)


def config_file(tmp: Path, extra: dict[str, Any]) -> Path:
    path = tmp / "broker.toml"
    write_config(
        path,
        {"socket_path": str(tmp / "b.sock"), "ledger": {"path": str(tmp / "l.db")}, **extra},
    )
    return path


@pytest.mark.parametrize(
    ("module", "extra", "config"),
    [
        (
            "psycopg",
            "postgres",
            {"ledger": {"kind": "postgres", "dsn": "postgresql://broker@localhost/broker"}},
        ),
        (
            "temporalio",
            "temporal",
            {"runtime": {"kind": "temporal", "allow_local_ledger": True}},
        ),
        ("opentelemetry.sdk", "tracing", {"tracing": {"otlp_endpoint": "http://127.0.0.1:9"}}),
    ],
)
def test_a_backend_without_its_extra_exits_78_naming_the_extra(
    short_tmp: Path, module: str, extra: str, config: dict[str, Any]
) -> None:
    done = brokerd_without([module], config_file(short_tmp, config))
    assert done.returncode == 78, done.stderr
    assert f"pip install 'agent-broker[{extra}]'" in done.stderr
    assert module in done.stderr
    assert "Traceback" not in done.stderr


def test_check_config_refuses_it_too(short_tmp: Path) -> None:
    """`--check-config` answers what a start would: the config cannot run here."""
    config = config_file(short_tmp, {"runtime": {"kind": "temporal", "allow_local_ledger": True}})
    done = brokerd_without(["temporalio"], config, "--check-config")
    assert done.returncode == 78, done.stderr
    assert "agent-broker[temporal]" in done.stderr


def test_the_default_config_needs_neither(short_tmp: Path) -> None:
    """SQLite and the local runtime start without either extra."""
    done = brokerd_without(["psycopg", "temporalio"], config_file(short_tmp, {}), "--check-config")
    assert done.returncode == 0, done.stderr
    assert "configuration is valid" in done.stdout
