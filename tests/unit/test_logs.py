"""plumbing.logs: a logger binds once per configuration and follows a reload's level.

Run in a fresh interpreter: logging configuration is process-wide.
"""

from __future__ import annotations

import subprocess
import sys

import orjson

SCRIPT = """
from plumbing import logs

log = logs.get("test.logs")
logs.configure("warning")
log.info("hidden")
first = log._bound
log.warning("shown", n=1)
assert log._bound is first, "bound again without a new configuration"
logs.configure("info")  # what a reload does
log.info("shown after the reload", n=2)
assert log._bound is not first, "still bound to the old configuration"
"""


def test_a_logger_binds_once_and_follows_a_reload() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    records = [orjson.loads(line) for line in done.stderr.splitlines()]
    assert [(r["event"], r["level"], r["n"]) for r in records] == [
        ("shown", "warning", 1),
        ("shown after the reload", "info", 2),
    ]
