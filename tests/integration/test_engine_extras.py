"""The engines and tools of issue 41 on an install without their extra: brokerd stops
with 78 and a sentence naming the extra, not an ImportError's traceback; and the core
install imports none of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_missing_extras import brokerd_without, config_file

CASES = [
    ({"engine": {"kind": "openai-agents", "agent": "x:agent"}}, ["agents"], "[openai-agents]"),
    ({"engine": {"kind": "adk", "agent": "x:root_agent"}}, ["google.adk"], "[adk]"),
    ({"engine": {"kind": "langgraph", "graph": "x:graph"}}, ["langgraph"], "[langgraph]"),
    (
        {"mcp": {"servers": [{"name": "s", "command": [sys.executable], "allow": ["t"]}]}},
        ["mcp"],
        "[mcp]",
    ),
]


@pytest.mark.parametrize(("extra", "hidden", "named"), CASES)
def test_a_framework_or_mcp_without_its_extra_is_a_config_error(
    tmp_path: Path, extra: dict[str, object], hidden: list[str], named: str
) -> None:
    done = brokerd_without(hidden, config_file(tmp_path, extra))
    assert done.returncode == 78, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_daemon_imports_no_framework_of_its_own_accord() -> None:
    code = (
        "import sys, broker.daemon, broker.daemon_cli, brokerctl.main;"
        " print(sorted(m for m in ('agents', 'google.adk', 'langgraph', 'langchain_core', 'mcp')"
        " if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
