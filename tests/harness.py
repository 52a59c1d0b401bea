"""Start the real daemon as a subprocess on a temporary socket and ledger.

Used by the integration and crash tests and by the benchmarks. A daemon's first
start finds its SQLite ledger already migrated when the test run has set a
template (`use_template`, tests/conftest.py): a copy of one ledger migrated by the
daemon's own code, so every start skips the migrations and nothing else changes.
Without a template (the benchmarks, a real machine) the daemon migrates its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from ledger.port.cipher import DRIVER_ENV
from tests import cluster
from tests.prefork import Forked, Server
from tests.temporal_runtime import default_runtime

# A start not ready by then has failed; a start returns as soon as the daemon accepts.
# At a load of 14 on 2 cores one was not ready within 20 s (its migrations took 16 s).
START_S = 60.0

# The migrated ledger a daemon's first start copies (see the module's docstring).
_template: Path | None = None
# Where daemons are forked from instead of started afresh (tests/prefork.py).
_forks: Server | None = None


def migrated_template(directory: Path) -> Path:
    """Migrate an empty ledger in `directory`, as the daemon would, and return it.
    Its connection is closed, so the file is whole without its WAL."""
    from ledger.db import connect, migrate

    path = directory / "template.db"
    conn = connect(path)
    try:
        migrate(conn)
    finally:
        conn.close()
    return path


def use_template(path: Path | None) -> None:
    """Daemons started from now on copy `path` as their new ledger (None: no copy)."""
    global _template
    _template = path


def use_forks(server: Server | None) -> Server | None:
    """Daemons started from now on are forked by `server` (None: each its own
    interpreter), except those with a command or environment of their own; the
    server used until now."""
    global _forks
    before, _forks = _forks, server
    return before


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table
        return "{ " + ", ".join(f'"{k}" = {_toml_value(v)}' for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


def write_config(path: Path, config: dict[str, Any]) -> None:
    """Write a small TOML file: top-level keys, then one table per nested dict."""
    lines: list[str] = []
    tables: list[str] = []
    for key, value in config.items():
        if isinstance(value, dict):
            tables.append(f"\n[{key}]")
            for k, v in value.items():
                if isinstance(v, dict):
                    inner = ", ".join(f'"{ik}" = {_toml_value(iv)}' for ik, iv in v.items())
                    tables.append(f"{k} = {{ {inner} }}")
                else:
                    tables.append(f"{k} = {_toml_value(v)}")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for entry in value:
                tables.append(f"\n[[{key}]]")
                tables.extend(f"{k} = {_toml_value(v)}" for k, v in entry.items())
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    path.write_text("\n".join(lines + tables) + "\n")
    tomllib.loads(path.read_text())  # fail early on a bad test config


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie is dead, just not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # reaped between open and read: ESRCH
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def gone_within(pid: int, seconds: float) -> bool:
    """Wait up to `seconds` for `pid` to end; False if it still runs."""
    deadline = time.monotonic() + seconds
    while process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def run_queue_wait(pid: int | None = None) -> float:
    """Seconds the live threads of `pid` (None: the calling thread) have spent
    runnable but waiting for a CPU (Linux schedstat): time a loaded machine took
    from them, not time they were slow. 0.0 once `pid` has ended."""
    tasks = [Path("/proc/thread-self")] if pid is None else None
    if tasks is None:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except FileNotFoundError:
            return 0.0
    total = 0
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue  # the thread ended meanwhile
    return total / 1e9


def time_to_end(pid: int, kill: Callable[[], None], limit: float) -> tuple[float, float] | None:
    """Call `kill`, then wait up to `limit` seconds for `pid` to end: the seconds it
    took, and how many of them `pid`'s threads or the calling thread waited for a
    CPU (`run_queue_wait`); None if it still runs. A deadline on the first less the
    second holds on a machine far past its cores as on an idle one."""
    waited_before = run_queue_wait(pid) + run_queue_wait()
    waited = waited_before
    kill()
    start = time.monotonic()
    while process_alive(pid):
        if time.monotonic() - start > limit:
            return None
        waited = max(waited, run_queue_wait(pid) + run_queue_wait())  # the last while alive
        time.sleep(0.02)
    took = time.monotonic() - start
    return took, min(took, waited - waited_before)


async def writer_pid(sock: Path) -> int | None:
    """The daemon's ledger writer process, from `health` (None when it writes in a thread)."""
    from wire.client import BrokerClient

    async with await BrokerClient.connect(sock) as op:
        pid = (await op.op("health")).get("writer_pid")
    return pid if isinstance(pid, int) else None


def brokerd_once(config: Path, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run brokerd on `config` in the foreground, for tests of how it refuses to start."""
    return subprocess.run(
        [sys.executable, "-m", "broker", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class DaemonProcess:
    """The broker daemon in a child process."""

    def __init__(
        self,
        workdir: Path,
        config: dict[str, Any] | None = None,
        backend: str = "asyncio",
        wrapper: list[str] | None = None,
        *,
        peer_of: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.env = env or {}  # the daemon's own, beside the test's (no BROKER_ from it)
        self.wrapper = wrapper or []  # a command the daemon runs under (bench.instructions)
        self.socket = workdir / "broker.sock"
        self.ledger = workdir / "ledger.db"
        self.config_path = workdir / "broker.toml"
        self.log_path = workdir / "broker.log"
        self.backend = backend
        base: dict[str, Any] = {
            "socket_path": str(self.socket),
            "log_level": "info",
            "ledger": {"path": str(self.ledger)},
            # Recall by meaning loads a model and embeds every message: only the tests
            # of it turn it on (tests/integration/test_recall_meaning.py).
            "recall": {"model_dir": ""},
        }
        # TEST_RUNTIME=temporal (tests/temporal_runtime.py); the SDK is asyncio's, so a
        # daemon on trio stays on the local runtime.
        runtime = default_runtime()
        if runtime is not None and backend == "asyncio":
            base["runtime"] = runtime
        # TEST_CLUSTER=2 (tests/cluster.py): a second node beside this one, `peers`.
        pair = cluster.pair_config() if peer_of is None and backend == "asyncio" else None
        if pair is not None:
            base.update(pair)
        for key, value in (config or {}).items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                base[key] = {**base[key], **value}
            else:
                base[key] = value
        if peer_of is not None:
            base = {**peer_of, "socket_path": str(self.socket), "node_id": "n1"}
        self.config = base
        write_config(self.config_path, base)
        self.proc: subprocess.Popen[bytes] | Forked | None = None
        self.peers: list[DaemonProcess] = []
        if pair is not None:
            (workdir / "n1").mkdir(exist_ok=True)
            self.peers.append(DaemonProcess(workdir / "n1", backend=backend, peer_of=base))

    def _seed_ledger(self) -> None:
        """Copy the template where this daemon's SQLite ledger is to be created."""
        ledger = self.config.get("ledger", {})
        if _template is None or ledger.get("kind", "sqlite") != "sqlite" or "path" not in ledger:
            return
        if ledger.get("key_file"):  # the template is plain; an encrypted ledger makes its own
            return
        if self.env:  # a driver of its own (BROKER_SQLITE_DRIVER): a ledger of its own
            return
        path = Path(ledger["path"])
        if not path.is_absolute():
            path = self.workdir / path
        if path.parent.is_dir() and not path.exists() and not Path(f"{path}-wal").exists():
            shutil.copyfile(_template, path)

    def start(self, timeout: float = START_S) -> DaemonProcess:
        for peer in self.peers:
            peer.start(timeout)
        self._seed_ledger()
        env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
        if DRIVER_ENV in os.environ:  # a benchmark's choice of SQLite driver (bench.ab)
            env[DRIVER_ENV] = os.environ[DRIVER_ENV]
        env.update(self.env)
        args = ["--config", str(self.config_path), "--backend", self.backend]
        if _forks is not None and not self.wrapper and not self.env and _forks.suits(env):
            self.proc = _forks.spawn(args, self.workdir, env, self.log_path, timeout)
        else:
            with self.log_path.open("ab") as log:
                self.proc = subprocess.Popen(
                    [*self.wrapper, sys.executable, "-m", "broker", *args],
                    stdin=subprocess.DEVNULL,  # not the test's (xdist talks over it)
                    stdout=log,
                    stderr=log,
                    env=env,
                    cwd=self.workdir,
                )
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{self.log()}")
                if self._accepting():
                    return self
                time.sleep(0.02)
            raise TimeoutError(f"daemon did not become ready:\n{self.log()}")
        except BaseException:  # a start given up (or a test's timeout) leaves no process
            self.kill()
            raise

    def _accepting(self) -> bool:
        if not self.socket.exists():
            return False
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(self.socket))
        except OSError:
            return False
        finally:
            probe.close()
        return True

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_lines(self) -> list[str]:
        return self.log().splitlines()

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        for peer in self.peers:
            peer.kill()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        for peer in self.peers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                peer.terminate(timeout)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        return int(self.proc.returncode or 0)

    def restart(self) -> DaemonProcess:
        self.kill()
        return self.start()

    def db(self) -> sqlite3.Connection:
        """A read connection to the ledger file (or database, on PostgreSQL)."""
        if self.config["ledger"].get("kind") == "postgres":
            from ledger.postgres.connection import PgConnection

            return cast(sqlite3.Connection, PgConnection(self.config["ledger"]["dsn"]))
        from ledger.port.cipher import plain_driver  # the daemon's own driver

        conn: sqlite3.Connection = plain_driver().connect(f"file:{self.ledger}?mode=ro", uri=True)
        conn.execute("PRAGMA busy_timeout = 5000")
        return conn

    def __enter__(self) -> DaemonProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.terminate(10)
