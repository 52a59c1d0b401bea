"""A daemon forked by tests/prefork.py sees what one started as `python -m broker`
sees, and its handle answers as `subprocess.Popen` does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import harness, prefork
from tests.harness import DaemonProcess

pytestmark = pytest.mark.skipif(not prefork.available(), reason="no pidfds on this kernel")

# An engine whose module, imported at the daemon's start, writes down what it sees.
PROBE = """
import json, os, sys

from broker.engines import EngineResult

with open("seen.json", "w") as out:
    json.dump(
        {
            "cwd": os.getcwd(),
            "argv": sys.argv,
            "path0": sys.path[0],
            "env": os.environ.get("PREFORK_PROBE"),
            "broker_env": sorted(k for k in os.environ if k.startswith("BROKER_")),
            "tests_imported": "tests" in sys.modules,
            "main": getattr(sys.modules["__main__"], "__file__", None),
            "stdin": os.readlink("/proc/self/fd/0"),
            "stdout": os.readlink("/proc/self/fd/1"),
            "stderr": os.readlink("/proc/self/fd/2"),
            "ppid_alive": os.getppid() != 1,
        },
        out,
    )


class Probe:
    name = "probe"
    accepts_steering = False
    context_window = 8192

    async def run(self, request, io):
        return EngineResult(text="ok", model="probe")

    async def aclose(self):
        return None


engine = Probe()
"""


@pytest.fixture
def server() -> Iterator[prefork.Server]:
    forks = prefork.Server()
    yield forks
    forks.stop()


def probed(work: Path, forks: prefork.Server | None, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Start a daemon with the probe engine in `work`, forked or not; what it saw."""
    work.mkdir()
    (work / "probe.py").write_text(PROBE)
    monkeypatch.setenv("PREFORK_PROBE", "from the test")
    monkeypatch.setenv("BROKER_LOG_LEVEL", "debug")  # the harness keeps these from daemons
    d = DaemonProcess(work, {"engine": {"kind": "python", "entry": "probe:engine"}})
    before = harness.use_forks(forks)
    try:
        d.start()
    finally:
        harness.use_forks(before)
    try:
        assert isinstance(d.proc, prefork.Forked) == (forks is not None)
        return json.loads((work / "seen.json").read_text())
    finally:
        assert d.terminate() == 0, d.log()


def test_a_forked_daemon_sees_what_a_started_one_sees(
    short_tmp: Path, server: prefork.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    forked = probed(short_tmp / "forked", server, monkeypatch)
    started = probed(short_tmp / "started", None, monkeypatch)
    for seen, work in ((forked, short_tmp / "forked"), (started, short_tmp / "started")):
        assert seen["cwd"] == seen["path0"] == str(work)
        assert seen["argv"][1:] == ["--config", str(work / "broker.toml"), "--backend", "asyncio"]
        assert seen["stdout"] == seen["stderr"] == str(work / "broker.log")
        seen["cwd"] = seen["path0"] = seen["argv"] = seen["stdout"] = seen["stderr"] = None
    assert forked == started
    assert forked["stdin"] == os.devnull
    assert forked["env"] == "from the test" and forked["broker_env"] == []
    assert not forked["tests_imported"] and forked["main"].endswith("broker/__main__.py")


def test_the_handle_answers_as_popen_does(short_tmp: Path, server: prefork.Server) -> None:
    d = DaemonProcess(short_tmp, {})
    before = harness.use_forks(server)
    try:
        d.start()
        proc = d.proc
        assert isinstance(proc, prefork.Forked) and proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(0.05)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL == proc.returncode == proc.poll()
        proc.kill()  # ended and reaped: nothing is signalled, nothing raised
        assert not harness.process_alive(proc.pid)
        d.start()  # on the same ledger, as a restart after a crash
        assert isinstance(d.proc, prefork.Forked) and d.proc.pid != proc.pid
        assert d.terminate() == 0
        (short_tmp / "bad").mkdir()
        bad = DaemonProcess(short_tmp / "bad", {"queue": {"debounce_ms": "soon"}})
        with pytest.raises(RuntimeError, match="exited with 78"):
            bad.start()
    finally:
        harness.use_forks(before)
