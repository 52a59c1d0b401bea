"""No server outlives the test process that started it.

Each test process marks its environment with an owner token (its pid and start
time), which every process it starts inherits: daemons, their writers, PostgreSQL
clusters (through runuser and pg_ctl) and Temporal dev servers (in sessions of
their own, out of reach of a ^C to the test's process group). A test process that
gets SIGINT or SIGTERM first ends what it owns, then goes on as it would have (a
KeyboardInterrupt, or death by the signal). A run that was killed outright leaves
its servers behind: the next run's start ends every process whose owner no longer
runs and removes the cluster and dev-server directories they used. A process whose
owner still runs (another run of the suite on this machine) is never touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

TOKEN = "AGENT_BROKER_TEST_OWNER"  # not BROKER_*: the harness strips those for daemons
# Directories of the servers' own state, removed with them (devcluster, DevServer).
STATE_DIRS = ("/tmp/broker-pg-", "/tmp/tmprl-")
QUIT_S = 5.0  # for PostgreSQL's immediate shutdown, then SIGKILL


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def token_of(pid: int) -> str | None:
    """`pid`'s owner token (its pid and start time), None when it has ended."""
    started = _start_time(pid)
    return None if started is None else f"{pid}:{started}"


def _alive(token: str) -> bool:
    pid, _, _started = token.partition(":")
    return pid.isdigit() and token_of(int(pid)) == token


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (entry.partition(b"=") for entry in raw.split(b"\0") if entry)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}


def _state_dirs(pid: int) -> Iterator[Path]:
    """The server state directories `pid`'s command line names."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return
    for arg in argv:
        text = arg.decode(errors="replace")
        for prefix in STATE_DIRS:
            if text.startswith(prefix):
                yield Path(prefix + text[len(prefix) :].split("/", 1)[0])


def owned(select: str | None = None) -> dict[int, str]:
    """Processes carrying an owner token: of `select` only, or (None) of any owner
    that has ended; pid -> token."""
    found: dict[int, str] = {}
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        token = _environ(int(entry.name)).get(TOKEN)
        if token is None:
            continue
        if (token == select) if select is not None else not _alive(token):
            found[int(entry.name)] = token
    return found


def _is_postgres(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() in ("postgres", "postmaster")
    except OSError:
        return False


def end(pids: dict[int, str]) -> list[Path]:
    """End each of `pids` (a test's server holds nothing worth keeping) and remove
    the state directories they named; the directories removed. PostgreSQL gets
    SIGQUIT first, its immediate shutdown, which also frees its shared memory."""
    dirs: set[Path] = set()
    for pid in pids:
        dirs.update(_state_dirs(pid))
    quit_first = [pid for pid in pids if _is_postgres(pid)]
    for pid in quit_first:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGQUIT)
    deadline = time.monotonic() + QUIT_S
    while any(token_of(pid) for pid in quit_first) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for directory in dirs:
        shutil.rmtree(directory, ignore_errors=True)
    return sorted(dirs)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    end(owned(os.environ[TOKEN]))
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def pytest_sessionstart(session: pytest.Session | None) -> None:
    stale = owned()
    if stale:
        removed = end(stale)
        print(f"ended {len(stale)} processes left by an interrupted run; removed {removed}")
    if session is not None and session.config.pluginmanager.hasplugin("dsession"):
        return  # xdist's controller starts no server, and must not end its workers
    token = token_of(os.getpid())
    assert token is not None
    os.environ[TOKEN] = token
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _on_signal)
