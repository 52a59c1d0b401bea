"""An adapter as a process of its own (`python -m adapters.<name> --config FILE`)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from tests.harness import write_config

# The bound on a wait that includes an adapter process's start (its "connected
# to", or its exit 75 after give_up_s): at a load of 10 on 2 cores the Matrix
# adapter's imports alone took 7 to 14 s (0.8 s of CPU), its first Synapse login
# 5 s more. Each wait ends as soon as what it waits for is there.
START_WITHIN_S = 60.0


class AdapterProcess:
    def __init__(self, module: str, workdir: Path, config: dict[str, Any]) -> None:
        self.module = module
        self.workdir = workdir
        self.config_path = workdir / f"{module}.toml"
        self.log_path = workdir / f"{module}.log"
        self.state_dir = workdir / "state"
        config.setdefault("adapter", {}).setdefault("state_dir", str(self.state_dir))
        write_config(self.config_path, config)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> AdapterProcess:
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    f"adapters.{self.module}",
                    "--config",
                    str(self.config_path),
                ],
                stdout=out,
                stderr=out,
            )
        return self

    def log(self) -> str:
        with contextlib.suppress(FileNotFoundError):
            return self.log_path.read_text(errors="replace")
        return ""

    def wait_log(self, text: str, within: float = 10.0, after: int = 0) -> int:
        """Until the log (from offset `after`) has `text`; the offset past it."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            log = self.log()
            found = log.find(text, after)
            if found >= 0:
                return found + len(text)
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"no {text!r} in the {self.module} adapter's log:\n{self.log()}")

    def wait_connected(self) -> int:
        """Until the adapter says it is connected to its server (START_WITHIN_S)."""
        return self.wait_log("connected to", within=START_WITHIN_S)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.proc.returncode)

    def wait_exit(self, within: float) -> int:
        assert self.proc is not None
        return int(self.proc.wait(within))


async def expect_login_refused(
    module: str, workdir: Path, config: dict[str, Any], started: list[AdapterProcess]
) -> None:
    """The adapter, whose password file now holds a wrong password, gives up after
    `give_up_s` with exit 75 and says why (issue 23: login refused)."""
    (workdir / f"{module}-password").write_text("wrong\n")
    config["adapter"]["give_up_s"] = 0.5
    proc = AdapterProcess(module, workdir, config).start()
    started.append(proc)
    assert await anyio.to_thread.run_sync(proc.wait_exit, START_WITHIN_S) == 75
    assert "login refused" in proc.log()
