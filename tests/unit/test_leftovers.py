"""tests/leftovers.py: servers of a test process that has ended are ended by the next
run, with their directories; those of a running one are not; a test process that
gets SIGTERM ends its own first."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from tests import leftovers
from tests.harness import gone_within, process_alive


def dead_token() -> str:
    """The token of a process that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    token = leftovers.token_of(proc.pid)
    proc.wait()
    assert token is not None and leftovers.token_of(proc.pid) is None
    return token


def server(token: str, state: Path) -> subprocess.Popen[bytes]:
    """A stand-in server: its owner token in its environment, its state dir on its
    command line (as the dev server's --db-filename)."""
    env = {**os.environ, leftovers.TOKEN: token}
    db = str(state / "temporal.db")
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--db-filename", db], env=env
    )


def wait_environ(proc: subprocess.Popen[bytes]) -> None:
    """Until its exec is done (its environment and command line are the new ones)."""
    deadline = time.monotonic() + 10
    while leftovers.TOKEN.encode() not in Path(f"/proc/{proc.pid}/environ").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_the_servers_of_an_ended_owner_go_and_those_of_a_running_one_stay() -> None:
    orphan_dir = Path(tempfile.mkdtemp(prefix="tmprl-", dir="/tmp"))
    kept_dir = Path(tempfile.mkdtemp(prefix="tmprl-", dir="/tmp"))
    mine = leftovers.token_of(os.getpid())
    assert mine is not None
    orphan, kept = server(dead_token(), orphan_dir), server(mine, kept_dir)
    try:
        wait_environ(orphan)
        wait_environ(kept)
        stale = leftovers.owned()
        assert orphan.pid in stale and kept.pid not in stale
        assert orphan_dir in leftovers.end(stale)
        assert orphan.wait(10) != 0
        assert not orphan_dir.exists()
        assert process_alive(kept.pid) and kept_dir.exists()
        assert kept.pid in leftovers.owned(mine)
    finally:
        for proc in (orphan, kept):
            proc.kill()
            proc.wait()
        for directory in (orphan_dir, kept_dir):
            if directory.exists():
                directory.rmdir()


def test_a_test_process_given_sigterm_ends_its_servers_first(tmp_path: Path) -> None:
    # A stand-in test process: the plugin's start, then a server of its own.
    root = Path(__file__).resolve().parents[2]
    script = textwrap.dedent(f"""
        import subprocess, sys, time
        sys.path.insert(0, {str(root)!r})
        from tests import leftovers
        leftovers.pytest_sessionstart(None)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            child = int(proc.stdout.readline())
            proc.terminate()
            assert proc.wait(10) == -15  # it still dies of the signal
            assert gone_within(child, 10)
        finally:
            proc.kill()
