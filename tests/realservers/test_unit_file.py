"""The adapters' systemd template verifies cleanly (systemd-analyze, as for brokerd)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "broker-adapter@.service"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_the_adapter_template_verifies_for_an_instance(short_tmp: Path) -> None:
    text = UNIT.read_text()
    assert "/opt/agent-broker/.venv/bin/python -m adapters.%i" in text
    (short_tmp / "broker-adapter@.service").write_text(
        text.replace("/opt/agent-broker/.venv/bin/python", sys.executable)
    )
    instance = short_tmp / "broker-adapter@irc.service"
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", "--generators=no", str(instance)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
